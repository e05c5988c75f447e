import type { Agent as HttpAgent, ClientRequest } from 'node:http'
import { HttpsProxyAgent } from 'https-proxy-agent'
import { Agent, buildConnector, EnvHttpProxyAgent, Pool, type Dispatcher } from 'undici'
import type { Config } from './config/load.js'
import type { ConnectTls } from './tls/files.js'

/**
 * An undici dispatcher that verifies TLS (undici's default, never turned
 * off here) and honours the egress proxy settings; for a single origin
 * without a proxy, a Pool (no per-request origin lookup). `tls` is what its
 * connections present (a client certificate) and trust (CAs), directly or
 * inside a proxy's tunnel. Whoever calls this closes what it returns.
 */
export function createDispatcher (egress: Config['egress'], origin: string | undefined, options: Agent.Options, tls: ConnectTls = {}, onTlsError?: (code: string) => void): Dispatcher {
  const { httpProxy, httpsProxy, noProxy } = egress
  const connect = onTlsError !== undefined ? { connect: watchedConnector(tls, onTlsError) } : Object.keys(tls).length === 0 ? {} : { connect: tls }
  if (httpProxy === undefined && httpsProxy === undefined) {
    return origin === undefined ? new Agent({ ...options, ...connect }) : new Pool(origin, { ...options, ...connect })
  }
  return new EnvHttpProxyAgent({ ...options, ...connect, ...(Object.keys(tls).length > 0 && { requestTls: tls }), httpProxy: httpProxy ?? '', httpsProxy: httpsProxy ?? '', noProxy: noProxy ?? '' })
}

/**
 * undici's connector, with `onTlsError` told the TLS errors of each
 * connection: a server's refusal of the client certificate comes as an
 * alert after the handshake, which undici reports as the other side having
 * closed; this tells the two apart.
 */
function watchedConnector (tls: ConnectTls, onTlsError: (code: string) => void): buildConnector.connector {
  const connect = buildConnector({ ...tls })
  return (options, callback) => connect(options, (err, socket) => {
    socket?.on('error', (e: NodeJS.ErrnoException) => { if (e.code?.startsWith('ERR_SSL_') === true) onTlsError(e.code) })
    if (err !== null) callback(err, null)
    else callback(null, socket!)
  })
}

/** How a route's WebSocket client reaches its upstream: through an egress proxy's tunnel, or directly. */
export interface WebSocketEgress {
  agent?: HttpAgent
  /** whether the egress proxy refused the tunnel of this handshake (its answer is then not the upstream's) */
  tunnelRefused?: (request: ClientRequest) => boolean
}

/**
 * The agent a route's WebSocket handshakes go through: a CONNECT tunnel
 * through the egress proxy (HTTPS_PROXY for wss, HTTP_PROXY for ws), TLS to
 * the upstream verified inside it; none when there is no proxy for the
 * upstream, or NO_PROXY names it (as undici's EnvHttpProxyAgent decides for
 * HTTP: a name, a `.suffix` or `*`, with an optional port). The decision is
 * made here because ws takes a Node http.Agent, which undici's agent is
 * not, and proxy-from-env reads the process's environment, which lacks the `.env` file's
 * settings.
 */
export function websocketEgress (egress: Config['egress'], origin: string): WebSocketEgress {
  const target = new URL(origin)
  const secure = target.protocol === 'https:'
  const proxy = secure ? egress.httpsProxy : egress.httpProxy
  if (proxy === undefined) return {}
  const port = target.port || (secure ? '443' : '80')
  for (const entry of (egress.noProxy ?? '').split(/[\s,]+/).filter(Boolean)) {
    if (entry === '*') return {}
    const [host, entryPort] = entry.replace(/^\*/, '').split(':') as [string, string | undefined]
    if (entryPort !== undefined && entryPort !== port) continue
    const name = target.hostname
    if (name === host.replace(/^\./, '') || (host.startsWith('.') ? name.endsWith(host) : name.endsWith(`.${host}`))) return {}
  }
  const agent = new HttpsProxyAgent(proxy)
  // The agent hands the proxy's refusal of a tunnel to the client as if the
  // upstream had answered: told apart here.
  const refused = new WeakSet<ClientRequest>()
  agent.on('proxyConnect', (connect: { statusCode: number }, request: ClientRequest) => { if (connect.statusCode !== 200) refused.add(request) })
  return { agent, tunnelRefused: (request) => refused.has(request) }
}
