import { randomUUID } from 'node:crypto'
import { STATUS_CODES, type IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import { WebSocket, WebSocketServer, type RawData } from 'ws'
import { errorBody, ERRORS, TokenUnavailableError, type ErrorCode } from '../errors.js'
import type { Logger } from '../logger.js'
import type { AuthorizationSource } from '../token/source.js'
import type { Config } from '../config/load.js'
import { pathOf, type AccessLine } from './access-log.js'
import { isConfined } from './confine.js'
import { proxyFor, tunnelThrough } from './tunnel.js'
import { countHeader, readClientHeaders, websocketHeaders } from './headers.js'

export interface WebSocketProxyOptions {
  origin: string
  basePath: string
  tokens: AuthorizationSource
  log: Logger
  /** longest wait for the upstream's answer to the handshake (UPSTREAM_TIMEOUT_MS), then 504 */
  timeoutMs: number
  /** the egress proxy settings: WebSockets go through HTTP(S)_PROXY like everything else */
  egress: Config['egress']
  /** one access-log line per session, when it ends: 101, or the status the client got */
  onSession: (line: AccessLine) => void
}

/** RFC 7230 token characters: what a subprotocol name may be made of. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
/** A Sec-WebSocket-Key is 16 random bytes in base64. */
const KEY = /^[A-Za-z0-9+/]{22}==$/

/**
 * Why a handshake cannot be forwarded faithfully, or undefined:
 * decided before anything reaches the upstream.
 */
export function handshakeProblem (req: IncomingMessage): string | undefined {
  const url = req.url ?? ''
  if (url.includes('#')) return 'a fragment in the target'
  if ((req.headers.upgrade ?? '').toLowerCase() !== 'websocket') return 'not a WebSocket upgrade'
  if (req.headers['sec-websocket-version'] !== '13') return 'an unknown Sec-WebSocket-Version'
  if (!KEY.test(req.headers['sec-websocket-key'] ?? '')) return 'a missing or malformed Sec-WebSocket-Key'
  if (countHeader(req.rawHeaders, 'sec-websocket-protocol') > 1) return 'a duplicated Sec-WebSocket-Protocol'
  const protocol = req.headers['sec-websocket-protocol']
  if (protocol !== undefined) {
    const names = protocol.split(',').map((p) => p.trim())
    if (names.some((n) => !TOKEN.test(n)) || new Set(names).size !== names.length) return 'a malformed Sec-WebSocket-Protocol'
  }
  return undefined
}

/** Close codes that may not be sent in a close frame (RFC 6455 §7.4.1), and what is sent instead. */
function sendableCode (code: number): number {
  if (code === 1005) return 1000 // no status given: a normal close
  if (code === 1006 || code === 1015 || code < 1000 || code >= 5000 || code === 1004) return 1014 // bad gateway
  return code
}

const { OPEN, CONNECTING } = WebSocket

/**
 * WebSocket upgrades: the upstream handshake carries the
 * sidecar's Authorization and the client's subprotocols; the client's
 * handshake completes only after the upstream's, with the subprotocol the
 * upstream chose. Messages, pings and close codes are relayed; an abnormal
 * upstream close reaches the client as a close frame (1014, bad gateway).
 */
export class WebSocketProxy {
  readonly #o: WebSocketProxyOptions
  readonly #wss = new WebSocketServer({ noServer: true, perMessageDeflate: false })
  readonly #target: string
  readonly #open = new Set<WebSocket>()
  /** client sockets whose handshake is under way */
  readonly #pending = new Set<Duplex>()
  /** upstream WebSockets still connecting */
  readonly #connecting = new Set<WebSocket>()
  #closing = false

  constructor (o: WebSocketProxyOptions) {
    this.#o = o
    this.#target = o.origin.replace(/^http/, 'ws') + o.basePath
    const target = new URL(this.#target)
    const proxy = proxyFor(target, o.egress)
    if (proxy !== undefined) this.#createConnection = tunnelThrough(proxy, target.protocol === 'wss:')
  }

  readonly #createConnection: ReturnType<typeof tunnelThrough> | undefined

  /** The server's 'upgrade' listener. */
  readonly upgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    const started = performance.now()
    socket.on('error', () => socket.destroy())
    const client = readClientHeaders(req.rawHeaders)
    const requestId = client.requestId ?? randomUUID()
    const url = req.url ?? ''
    let status = 0
    // one access line per session, whatever ends it
    socket.once('close', () => {
      this.#pending.delete(socket)
      this.#o.onSession({ requestId, method: req.method ?? 'GET', path: pathOf(url), status: status || 499, durationMs: Math.round((performance.now() - started) * 10) / 10 })
    })
    const answer = (code: ErrorCode, retryAfter?: number): void => {
      status = ERRORS[code].status
      refuse(socket, code, requestId, retryAfter)
    }
    const problem = isConfined(url) ? handshakeProblem(req) : 'a target outside BASE_URL'
    if (problem !== undefined) {
      this.#o.log.debug({ requestId, problem }, 'websocket handshake refused')
      return answer('bad_request')
    }
    if (this.#closing) { socket.destroy(); return }
    this.#pending.add(socket)
    this.#o.tokens.authorization().then((authorization) => {
      if (socket.destroyed) return
      this.#connect(req, socket, head, url, authorization, requestId, client, (s) => { status = s })
    }).catch((err: unknown) => {
      if (err instanceof TokenUnavailableError) return answer('token_unavailable', err.retryAfterSeconds)
      this.#o.log.warn({ requestId, err: { type: (err as Error).name } }, 'websocket upgrade failed')
      answer('upstream_unreachable')
    })
  }

  /** Closes every open WebSocket with 1001 (going away), and every handshake still under way. */
  close (): void {
    this.#closing = true
    for (const ws of this.#open) ws.close(1001, 'proxy shutting down')
    for (const socket of this.#pending) socket.destroy()
    for (const upstream of this.#connecting) upstream.terminate()
  }

  #connect (req: IncomingMessage, socket: Duplex, head: Buffer, url: string, authorization: string, requestId: string, client: ReturnType<typeof readClientHeaders>, onStatus: (status: number) => void): void {
    const protocols = (req.headers['sec-websocket-protocol'] ?? '').split(',').map((p) => p.trim()).filter(Boolean)
    const upstream = new WebSocket(this.#target + url, protocols, {
      headers: websocketHeaders(client, { authorization, host: '', requestId, clientIp: req.socket.remoteAddress }),
      perMessageDeflate: false,
      followRedirects: false,
      // no answer to the handshake in time: 504
      handshakeTimeout: this.#o.timeoutMs,
      ...(this.#createConnection !== undefined && { createConnection: this.#createConnection as never })
    })
    this.#connecting.add(upstream)
    let opened = false
    upstream.once('open', () => { opened = true; this.#connecting.delete(upstream) })
    upstream.once('close', () => this.#connecting.delete(upstream))
    const log = this.#o.log
    upstream.once('unexpected-response', (_request, response) => {
      // The upstream refused the upgrade: the client gets its status.
      if (response.statusCode === 401) this.#o.tokens.rejected(authorization)
      const status = response.statusCode ?? 502
      onStatus(status)
      socket.end(`HTTP/1.1 ${status} ${response.statusMessage ?? ''}\r\nconnection: close\r\ncontent-length: 0\r\nx-request-id: ${requestId}\r\n\r\n`)
      response.destroy()
      upstream.terminate()
    })
    upstream.once('error', (err) => {
      // ws reports a failed handshake in state CLOSING: whatever the state,
      // a client still waiting gets an answer
      if (!opened && !socket.destroyed && !socket.writableEnded) {
        const timedOut = /handshake has timed out/i.test(err.message)
        log.warn({ requestId, upstreamError: (err as { code?: string }).code ?? (timedOut ? 'handshake_timeout' : err.name) }, 'websocket upstream failed')
        const code: ErrorCode = timedOut ? 'upstream_timeout' : 'upstream_unreachable'
        onStatus(ERRORS[code].status)
        refuse(socket, code, requestId)
      }
    })
    socket.once('close', () => { if (upstream.readyState === CONNECTING) upstream.terminate() })
    upstream.once('open', () => {
      if (socket.destroyed) return upstream.terminate()
      // Messages may arrive before the client's handshake is done: keep them.
      const early: Array<[RawData, boolean]> = []
      const keep = (data: RawData, isBinary: boolean): void => { early.push([data, isBinary]) }
      upstream.on('message', keep)
      // handleUpgrade asks handleProtocols synchronously, so setting it just
      // before is safe: the client gets the subprotocol the upstream chose.
      const wss = this.#wss
      wss.options.handleProtocols = () => upstream.protocol === '' ? false : upstream.protocol
      this.#pending.delete(socket)
      onStatus(101)
      wss.handleUpgrade(req, socket, head, (downstream) => {
        upstream.off('message', keep)
        for (const [data, isBinary] of early) downstream.send(data, { binary: isBinary })
        this.#relay(downstream, upstream)
        if (upstream.readyState !== OPEN) downstream.close(1014, 'upstream closed abnormally')
      })
    })
  }

  #relay (downstream: WebSocket, upstream: WebSocket): void {
    this.#open.add(downstream)
    const forward = (to: WebSocket) => (data: RawData, isBinary: boolean): void => {
      if (to.readyState === OPEN) to.send(data, { binary: isBinary })
    }
    downstream.on('message', forward(upstream))
    upstream.on('message', forward(downstream))
    downstream.on('ping', (d) => { if (upstream.readyState === OPEN) upstream.ping(d) })
    upstream.on('ping', (d) => { if (downstream.readyState === OPEN) downstream.ping(d) })
    downstream.on('pong', (d) => { if (upstream.readyState === OPEN) upstream.pong(d) })
    upstream.on('pong', (d) => { if (downstream.readyState === OPEN) downstream.pong(d) })
    const closeOther = (other: WebSocket) => (code: number, reason: Buffer): void => {
      if (other.readyState === OPEN || other.readyState === CONNECTING) {
        other.close(sendableCode(code), code === 1006 ? 'upstream closed abnormally' : reason)
      }
    }
    downstream.on('close', (code, reason) => { this.#open.delete(downstream); closeOther(upstream)(code, reason) })
    upstream.on('close', closeOther(downstream))
    downstream.on('error', () => downstream.terminate())
    upstream.on('error', () => upstream.terminate())
  }
}

function refuse (socket: Duplex, code: ErrorCode, requestId: string, retryAfter?: number): void {
  if (socket.destroyed) return
  const body = errorBody(code)
  const { status } = ERRORS[code]
  socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\n` +
    `content-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n` +
    `x-request-id: ${requestId}\r\n${retryAfter === undefined ? '' : `retry-after: ${retryAfter}\r\n`}\r\n${body}`)
}
