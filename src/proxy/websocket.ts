import { randomUUID } from 'node:crypto'
import { STATUS_CODES, type IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import { WebSocket, WebSocketServer } from 'ws'
import type { Config } from '../config/load.js'
import { errorBody, ERRORS, TokenUnavailableError, type ErrorCode } from '../errors.js'
import type { Logger } from '../logger.js'
import type { AuthorizationSource } from '../token/source.js'
import { pathOf, type AccessLine } from './access-log.js'
import { isConfined } from './confine.js'
import { upstream401, type DpopRefusal } from './dpop-challenge.js'
import { countHeader, readClientHeaders, websocketHeaders, type ClientHeaders } from './headers.js'
import { proxyFor, tunnelThrough } from './tunnel.js'
import { relay } from './websocket-relay.js'

export interface WebSocketProxyOptions {
  origin: string
  basePath: string
  tokens: AuthorizationSource
  log: Logger
  /** longest wait for the upstream's answer to the handshake (UPSTREAM_TIMEOUT_MS), then 504 */
  timeoutMs: number
  /** the largest message relayed either way (WEBSOCKET_MAX_MESSAGE_BYTES); beyond it the session is closed with 1009 */
  maxMessageBytes: number
  /** the egress proxy settings: WebSockets go through HTTP(S)_PROXY like everything else */
  egress: Config['egress']
  /** one access-log line per session, when it ends: 101, or the status the client got */
  onSession: (line: AccessLine) => void
  /** the upstream refused a handshake's DPoP proof (a 401 with a DPoP error), for this reason */
  onDpopRefused: (reason: DpopRefusal) => void
}

/** RFC 7230 token characters: what a subprotocol name may be made of. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
/** A Sec-WebSocket-Key is 16 random bytes in base64. */
const KEY = /^[A-Za-z0-9+/]{22}==$/
/** Bytes a client may send before its handshake is answered (it should send none). */
const MAX_EARLY_BYTES = 64 * 1024

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

/**
 * WebSocket upgrades: the upstream handshake carries the sidecar's
 * Authorization and the client's subprotocols; the client's handshake
 * completes only after the upstream's, with the subprotocol the upstream
 * chose, so that an upstream refusal reaches the client as its status.
 * Messages, pings and close codes are then relayed (websocket-relay.ts).
 */
export class WebSocketProxy {
  readonly #o: WebSocketProxyOptions
  readonly #wss: WebSocketServer
  readonly #target: string
  readonly #createConnection: ReturnType<typeof tunnelThrough> | undefined
  /** every handshake under way and session open, closed on shutdown */
  readonly #live = new Set<{ close(): void }>()
  #closing = false

  constructor (o: WebSocketProxyOptions) {
    this.#o = o
    this.#wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: o.maxMessageBytes })
    this.#target = o.origin.replace(/^http/, 'ws') + o.basePath
    const target = new URL(this.#target)
    const proxy = proxyFor(target, o.egress)
    if (proxy !== undefined) this.#createConnection = tunnelThrough(proxy, target.protocol === 'wss:')
  }

  /** The server's 'upgrade' listener. */
  readonly upgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    const started = performance.now()
    const client = readClientHeaders(req.rawHeaders)
    const requestId = client.requestId ?? randomUUID()
    const url = req.url ?? ''
    let status = 0
    let upstream: WebSocket | undefined
    let downstream: WebSocket | undefined
    const session = {
      close: () => {
        if (downstream !== undefined) return downstream.close(1001, 'proxy shutting down')
        socket.destroy()
        upstream?.terminate()
      }
    }
    socket.on('error', () => socket.destroy())
    // One access line per session, whatever ends it. A client that leaves
    // before its handshake is answered takes the upstream connection with
    // it, and the line is its own (499).
    socket.once('close', () => {
      this.#live.delete(session)
      if (downstream === undefined) upstream?.terminate()
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
    if (this.#closing) return void socket.destroy()
    this.#live.add(session)

    // Read while waiting, so that a client that leaves is noticed at once;
    // what it sends meanwhile is kept for the WebSocket server.
    const early: Buffer[] = [head]
    let earlyBytes = head.length
    const keep = (chunk: Buffer): void => {
      early.push(chunk)
      earlyBytes += chunk.length
      if (earlyBytes > MAX_EARLY_BYTES) socket.destroy()
    }
    socket.on('data', keep)
    socket.once('end', () => { if (downstream === undefined) socket.destroy() })

    // One handshake with the upstream; a second, once, when its 401 asks
    // for a DPoP nonce (the token is not the problem then).
    const connect = (authorization: string, replayed: boolean): void => {
      const up = upstream = this.#openUpstream(req, url, authorization, requestId, client)
      up.once('unexpected-response', (_request, response) => {
        this.#o.tokens.upstreamNonce(response.headers['dpop-nonce'])
        if (response.statusCode === 401) {
          const { refusal } = upstream401(response.headers['www-authenticate'], authorization, this.#o.tokens, this.#o.onDpopRefused)
          if (refusal === 'use_dpop_nonce' && !replayed && !socket.destroyed) {
            response.destroy()
            up.terminate()
            return connect(authorization, true)
          }
        }
        // The upstream refused the upgrade: the client gets its status.
        status = response.statusCode ?? 502
        socket.end(`HTTP/1.1 ${status} ${response.statusMessage ?? ''}\r\nconnection: close\r\ncontent-length: 0\r\nx-request-id: ${requestId}\r\n\r\n`)
        response.destroy()
        up.terminate()
      })
      up.once('error', (err) => {
        // ws reports a failed handshake in state CLOSING: whatever the
        // state, a client still waiting gets an answer (from the latest
        // handshake only)
        if (up !== upstream || downstream !== undefined || socket.destroyed || socket.writableEnded) return
        const timedOut = /handshake has timed out/i.test(err.message)
        this.#o.log.warn({ requestId, upstreamError: (err as { code?: string }).code ?? (timedOut ? 'handshake_timeout' : err.name) }, 'websocket upstream failed')
        answer(timedOut ? 'upstream_timeout' : 'upstream_unreachable')
      })
      up.once('open', () => {
        if (socket.destroyed) return up.terminate()
        // nothing is read from the upstream until the client can take it
        up.pause()
        socket.off('data', keep)
        // handleUpgrade asks handleProtocols synchronously, so setting it
        // just before is safe: the client gets the subprotocol the upstream chose.
        this.#wss.options.handleProtocols = () => up.protocol === '' ? false : up.protocol
        this.#wss.handleUpgrade(req, socket, Buffer.concat(early), (ws) => {
          status = 101
          downstream = ws
          relay(ws, up)
          up.resume()
          if (up.readyState !== WebSocket.OPEN) ws.close(1014, 'upstream closed abnormally')
        })
      })
    }

    this.#o.tokens.authorization().then((authorization) => {
      if (!socket.destroyed) connect(authorization, false)
    }).catch((err: unknown) => {
      if (err instanceof TokenUnavailableError) return answer('token_unavailable', err.retryAfterSeconds)
      this.#o.log.warn({ requestId, err: { type: (err as Error).name } }, 'websocket upgrade failed')
      answer('upstream_unreachable')
    })
  }

  /** Closes every open WebSocket with 1001 (going away), and every handshake still under way. */
  close (): void {
    this.#closing = true
    for (const session of this.#live) session.close()
  }

  #openUpstream (req: IncomingMessage, url: string, authorization: string, requestId: string, client: ClientHeaders): WebSocket {
    const protocols = (req.headers['sec-websocket-protocol'] ?? '').split(',').map((p) => p.trim()).filter(Boolean)
    const target = new URL(this.#target + url)
    // a handshake's proof names the URL with http or https (RFC 9449 §4.2)
    const dpop = this.#o.tokens.proof(authorization, 'GET', `${target.protocol === 'wss:' ? 'https:' : 'http:'}//${target.host}${target.pathname}`)
    return new WebSocket(target, protocols, {
      headers: websocketHeaders(client, { authorization, ...(dpop !== undefined && { dpop }), host: '', requestId, clientIp: req.socket.remoteAddress }),
      perMessageDeflate: false,
      followRedirects: false,
      maxPayload: this.#o.maxMessageBytes,
      // no answer to the handshake in time: 504
      handshakeTimeout: this.#o.timeoutMs,
      ...(this.#createConnection !== undefined && { createConnection: this.#createConnection as never })
    })
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
