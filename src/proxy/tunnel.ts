import { connect as netConnect, isIP, type Socket } from 'node:net'
import { connect as tlsConnect } from 'node:tls'
import type { Config } from '../config/load.js'

type Callback = (err: Error | null, socket?: Socket) => void

/** Longest answer head a proxy may send to CONNECT. */
const MAX_HEAD_BYTES = 16 * 1024

/**
 * The egress proxy for a WebSocket target, as undici's EnvHttpProxyAgent
 * chooses for HTTP: HTTPS_PROXY for wss, HTTP_PROXY for ws, nothing when
 * NO_PROXY matches the host (a name, a `.suffix` or `*`, with an optional port).
 */
export function proxyFor (target: URL, egress: Config['egress']): URL | undefined {
  const proxy = target.protocol === 'wss:' ? egress.httpsProxy : egress.httpProxy
  if (proxy === undefined) return undefined
  const port = target.port || (target.protocol === 'wss:' ? '443' : '80')
  for (const entry of (egress.noProxy ?? '').split(/[\s,]+/).filter(Boolean)) {
    if (entry === '*') return undefined
    const [host, entryPort] = entry.replace(/^\*/, '').split(':') as [string, string | undefined]
    if (entryPort !== undefined && entryPort !== port) continue
    const name = target.hostname
    if (name === host.replace(/^\./, '') || (host.startsWith('.') ? name.endsWith(host) : name.endsWith(`.${host}`))) return undefined
  }
  return new URL(proxy)
}

/**
 * A `createConnection` for `ws` that opens the WebSocket's connection through
 * an HTTP CONNECT tunnel, TLS to the target verified inside it: WebSockets
 * go through HTTP(S)_PROXY like everything else. Node's
 * http client waits for the callback.
 */
export function tunnelThrough (proxy: URL, secure: boolean): (options: { host?: string, port?: number | string, servername?: string }, callback: Callback) => undefined {
  return (options, done) => {
    let answered = false
    const callback: Callback = (err, s) => { if (!answered) { answered = true; done(err, s) } }
    const host = String(options.host ?? '').replace(/^\[|\]$/g, '')
    const port = Number(options.port)
    const socket = netConnect(Number(proxy.port || (proxy.protocol === 'https:' ? 443 : 80)), proxy.hostname.replace(/^\[|\]$/g, ''))
    let head = Buffer.alloc(0)
    const fail = (err: Error): void => { socket.destroy(); callback(err) }
    socket.once('error', fail)
    socket.once('connect', () => {
      const auth = proxy.username === '' ? '' : `proxy-authorization: Basic ${Buffer.from(`${decodeURIComponent(proxy.username)}:${decodeURIComponent(proxy.password)}`).toString('base64')}\r\n`
      const authority = isIP(host) === 6 ? `[${host}]:${port}` : `${host}:${port}`
      socket.write(`CONNECT ${authority} HTTP/1.1\r\nhost: ${authority}\r\n${auth}\r\n`)
    })
    const onData = (chunk: Buffer): void => {
      head = Buffer.concat([head, chunk])
      const end = head.indexOf('\r\n\r\n')
      if (end === -1) {
        if (head.length > MAX_HEAD_BYTES) fail(new Error('egress proxy answered CONNECT with an oversized head'))
        return
      }
      socket.off('data', onData)
      socket.off('error', fail)
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(head.subarray(0, end).toString('latin1'))?.[1])
      if (status !== 200) return fail(Object.assign(new Error(`egress proxy refused the tunnel (${Number.isNaN(status) ? 'no status' : status})`), { code: 'ECONNREFUSED' }))
      const rest = head.subarray(end + 4)
      if (rest.length > 0) socket.unshift(rest)
      if (!secure) return callback(null, socket)
      const tls = tlsConnect({ socket, servername: isIP(host) === 0 ? (options.servername ?? host) : '' })
      tls.once('error', (err) => { tls.destroy(); callback(err) })
      tls.once('secureConnect', () => callback(null, tls))
    }
    socket.on('data', onData)
    return undefined
  }
}
