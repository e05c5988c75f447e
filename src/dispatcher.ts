import type { ClientRequest } from 'node:http'
import { HttpsProxyAgent } from 'https-proxy-agent'
import { Agent, EnvHttpProxyAgent, Pool, type Dispatcher } from 'undici'
import type { Config } from './config/load.js'
import type { WebSocketEgress } from './proxy/websocket.js'

/**
 * An undici dispatcher that verifies TLS (undici's default, never turned
 * off here) and honours the egress proxy settings; for a single origin
 * without a proxy, a Pool (no per-request origin lookup). Whoever calls this
 * closes what it returns.
 */
export function createDispatcher (egress: Config['egress'], origin: string | undefined, options: Agent.Options): Dispatcher {
  const { httpProxy, httpsProxy, noProxy } = egress
  if (httpProxy === undefined && httpsProxy === undefined) {
    return origin === undefined ? new Agent(options) : new Pool(origin, options)
  }
  return new EnvHttpProxyAgent({ ...options, httpProxy: httpProxy ?? '', httpsProxy: httpsProxy ?? '', noProxy: noProxy ?? '' })
}

/**
 * The agent a route's WebSocket handshakes go through: a CONNECT tunnel
 * through the egress proxy (HTTPS_PROXY for wss, HTTP_PROXY for ws), TLS to
 * the upstream verified inside it; none when there is no proxy for the
 * upstream, or NO_PROXY names it (as undici's EnvHttpProxyAgent decides for
 * HTTP: a name, a `.suffix` or `*`, with an optional port).
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
