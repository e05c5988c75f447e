import { request as httpRequest, type ClientRequest } from 'node:http'
import { request as httpsRequest } from 'node:https'
import type { Socket } from 'node:net'
import { buildConnector, errors } from 'undici'
import type { Config } from './config/load.js'
import { bypassesProxy } from './config/no-proxy.js'
import { TunnelRefusedError } from './errors.js'
import type { ConnectTls } from './tls/files.js'

/** undici's connector signature: a connection to one origin, handed to `callback`. */
export type Connector = buildConnector.connector

/** The TCP and TLS handshake, and a proxy's answer to CONNECT, get as long as undici gives a connection (its default). */
const CONNECT_TIMEOUT_MS = 10_000

/**
 * The egress proxy that connections to `origin` go through: HTTPS_PROXY for
 * https, HTTP_PROXY for http; none when NO_PROXY names the origin (as it
 * does for the tracing exporter's).
 */
export function proxyFor (egress: Config['egress'], origin: URL): URL | undefined {
  const proxy = origin.protocol === 'https:' ? egress.httpsProxy : egress.httpProxy
  if (proxy === undefined || bypassesProxy(egress.noProxy ?? '', origin)) return undefined
  return new URL(proxy)
}

/**
 * How connections reach one route's upstream, for its HTTP pool and its
 * WebSocket handshakes alike: directly, or through a CONNECT tunnel of the
 * egress proxy, TLS to the upstream verified (inside the tunnel, when
 * there is one) with what `tls` presents and trusts. `onTlsError` is told
 * each connection's TLS errors: a server's refusal of the client
 * certificate comes as an alert after the handshake, which undici reports
 * as the other side having closed.
 */
export function originConnector (egress: Config['egress'], origin: string, tls: ConnectTls, onTlsError?: (code: string) => void): Connector {
  const target = new URL(origin)
  const secured = buildConnector({ ...tls, timeout: CONNECT_TIMEOUT_MS })
  const proxy = proxyFor(egress, target)
  const connect: Connector = proxy === undefined
    ? secured
    : (options, callback) => tunnel(proxy, options, (err, socket) => {
        if (err !== null) return callback(err, null)
        if (options.protocol !== 'https:') return callback(null, socket)
        secured({ ...options, httpSocket: socket }, callback)
      })
  return onTlsError === undefined ? connect : watchTlsErrors(connect, onTlsError)
}

/** `connect`, with `onTlsError` told the TLS errors of each connection it makes. */
export function watchTlsErrors (connect: Connector, onTlsError: (code: string) => void): Connector {
  return (options, callback) => connect(options, (err, socket) => {
    socket?.on('error', (e: NodeJS.ErrnoException) => { if (e.code?.startsWith('ERR_SSL_') === true) onTlsError(e.code) })
    if (err !== null) callback(err, null)
    else callback(null, socket!)
  })
}

/**
 * A connector as Node's `http.request` takes it (`createConnection`), for
 * a WebSocket client: the same connections as the route's pool. Node takes
 * the socket from the callback, as an Agent's `createConnection` may give it.
 */
export function createConnection (connect: Connector, origin: string): (options: object, callback: (err: Error | null, socket?: Socket) => void) => undefined {
  const { hostname, host, protocol, port } = new URL(origin)
  return (_options, callback) => {
    connect({ hostname, host, protocol, port }, (err, socket) => {
      if (err !== null) callback(err)
      else callback(null, socket as Socket)
    })
    return undefined
  }
}

/** A CONNECT tunnel through `proxy` to the authority `options` name, its credentials from the proxy URL's. */
function tunnel (proxy: URL, options: buildConnector.Options, callback: (...args: [Error, null] | [null, Socket]) => void): void {
  const authority = `${options.hostname.includes(':') && !options.hostname.startsWith('[') ? `[${options.hostname}]` : options.hostname}:${options.port || (options.protocol === 'https:' ? '443' : '80')}`
  const headers: Record<string, string> = { host: authority }
  if (proxy.username !== '' || proxy.password !== '') {
    headers['proxy-authorization'] = `Basic ${Buffer.from(`${decodeURIComponent(proxy.username)}:${decodeURIComponent(proxy.password)}`).toString('base64')}`
  }
  const send = proxy.protocol === 'https:' ? httpsRequest : httpRequest
  let done = false
  const finish = (...args: [Error, null] | [null, Socket]): void => {
    if (done) return
    done = true
    clearTimeout(timer)
    callback(...args)
  }
  const req: ClientRequest = send({ host: proxy.hostname.replace(/^\[|\]$/g, ''), port: proxy.port, method: 'CONNECT', path: authority, headers, agent: false })
  const timer = setTimeout(() => { req.destroy(); finish(new errors.ConnectTimeoutError(), null) }, CONNECT_TIMEOUT_MS)
  req.once('connect', (res, socket, head) => {
    if (res.statusCode !== 200) {
      socket.destroy()
      return finish(new TunnelRefusedError(res.statusCode ?? 0), null)
    }
    if (head.length > 0) socket.unshift(head)
    finish(null, socket)
  })
  req.once('response', (res) => { res.destroy(); req.destroy(); finish(new TunnelRefusedError(res.statusCode ?? 0), null) })
  req.once('error', (err) => finish(err, null))
  req.end()
}
