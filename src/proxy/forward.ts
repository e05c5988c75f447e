import { randomUUID } from 'node:crypto'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Dispatcher } from 'undici'
import { errorBody, TokenUnavailableError, ERRORS, type ErrorCode } from '../errors.js'
import { noteRequestBody } from '../heap.js'
import type { Logger } from '../logger.js'
import type { AuthorizationSource } from '../token/manager.js'
import { isConfined } from './confine.js'
import { pushForwardingHeaders, readClientHeaders, responseHeaders, type ClientHeaders } from './headers.js'

export interface ForwardOptions {
  /** `scheme://host[:port]` of BASE_URL */
  origin: string
  /** BASE_URL's path without the trailing slash, '' for none */
  basePath: string
  dispatcher: Dispatcher
  tokens: AuthorizationSource
  log: Logger
  /** the access log: one call per answered request */
  onResponse: (req: IncomingMessage, res: ServerResponse, status: number) => void
}

/** TRACE would echo the injected Authorization header back to the client. */
const REFUSED_METHODS = new Set(['TRACE', 'CONNECT'])
/** Idempotent methods without a body may be sent again when a pooled socket turned out dead. */
const RETRYABLE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS'])
/** The errors of a kept-alive socket that the upstream closed under the request. */
const STALE_SOCKET_ERRORS = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE'])

/** Marks a held first chunk as already written. */
const EMPTY = Buffer.alloc(0)

const kStarted = Symbol('started')
const kRequestId = Symbol('requestId')
const kExchange = Symbol('exchange')

/** When the request arrived (performance.now()), for the access log. */
export function startedAt (req: IncomingMessage): number {
  return (req as unknown as { [kStarted]: number })[kStarted]
}

/** The request's id: the client's X-Request-Id, or a new one. */
export function requestIdOf (req: IncomingMessage): string {
  return (req as unknown as { [kRequestId]: string })[kRequestId]
}

/**
 * Creates the request handler of the proxy (SPEC §3): confines the target,
 * obtains the Authorization header, forwards through undici, streams the
 * answer back, and maps failures to the sidecar's JSON errors.
 */
export function createForwarder (opts: ForwardOptions): (req: IncomingMessage, res: ServerResponse) => void {
  const host = new URL(opts.origin).host

  // One shared listener, not a closure per request: it aborts the upstream
  // request of a client that left, and writes the access log.
  function finished (this: ServerResponse): void {
    (this as unknown as { [kExchange]?: Exchange })[kExchange]?.clientClosed()
    opts.onResponse(this.req, this, this.statusCode)
  }

  return function forward (req, res) {
    const r = req as unknown as { [kStarted]: number, [kRequestId]: string }
    r[kStarted] = performance.now()
    const client = readClientHeaders(req.rawHeaders)
    const requestId = client.requestId ?? randomUUID()
    r[kRequestId] = requestId
    res.once('close', finished)

    const url = req.url ?? ''
    if (!isConfined(url)) return sendError(res, requestId, 'bad_request')
    if (REFUSED_METHODS.has(req.method ?? '')) return sendError(res, requestId, 'bad_request', 405)

    if (client.hasBody) noteRequestBody(client.contentLength)
    const exchange = new Exchange(req, res, client, requestId, opts.basePath + url, opts, host);
    (res as unknown as { [kExchange]: Exchange })[kExchange] = exchange
    const header = opts.tokens.current()
    if (header !== undefined) {
      exchange.send(header)
    } else {
      opts.tokens.authorization().then((h) => exchange.send(h), (err: unknown) => exchange.unavailable(err))
    }
  }
}

/**
 * One client request and its trip upstream: an undici dispatch handler
 * (the callback interface undici runs natively, so nothing is wrapped),
 * writing the answer straight into the client's response.
 */
class Exchange implements Dispatcher.DispatchHandler {
  readonly #req: IncomingMessage
  readonly #res: ServerResponse
  readonly #client: ClientHeaders
  readonly #requestId: string
  readonly #path: string
  readonly #o: ForwardOptions
  /** the upstream's `host[:port]`, for the Host header */
  readonly #host: string
  #authorization = ''
  #abort: ((err?: Error) => void) | undefined
  #resume: (() => void) | undefined
  /** length of the client's forwarded headers, before the sidecar's own */
  readonly #clientHeaderCount: number
  #attempt = 0
  /** the answer is a 401 that will be replayed: its body is dropped */
  #replaying = false
  #replayed = false
  #ended = false
  /**
   * The first body chunk, held back: when it is also the last, head and body
   * leave in one write with end() instead of a write and an end.
   */
  #held: Buffer | undefined

  constructor (req: IncomingMessage, res: ServerResponse, client: ClientHeaders, requestId: string, path: string, o: ForwardOptions, host: string) {
    this.#req = req
    this.#res = res
    this.#client = client
    this.#requestId = requestId
    this.#path = path
    this.#o = o
    this.#host = host
    this.#clientHeaderCount = client.forward.length
  }

  send (authorization: string): void {
    if (this.#res.destroyed) return
    this.#authorization = authorization
    this.#replaying = false
    const client = this.#client
    const body = client.hasBody ? this.#req : null
    // The client's header list is reused: a replay replaces only the sidecar's part.
    const headers = client.forward
    headers.length = this.#clientHeaderCount
    this.#attempt += 1
    this.#o.dispatcher.dispatch({
      origin: this.#o.origin,
      path: this.#path,
      method: this.#req.method as Dispatcher.HttpMethod,
      headers: pushForwardingHeaders(headers, client, {
        authorization,
        host: this.#host,
        requestId: this.#requestId,
        clientIp: this.#req.socket.remoteAddress
      }),
      body
    }, this)
  }

  /** The client's connection closed: if the answer was not complete, the upstream request is aborted. */
  clientClosed (): void {
    if (!this.#ended) this.#abort?.(new Error('client closed the connection'))
  }

  unavailable (err: unknown): void {
    const seconds = err instanceof TokenUnavailableError ? err.retryAfterSeconds : 1
    sendError(this.#res, this.#requestId, 'token_unavailable', undefined, String(seconds))
  }

  onConnect (abort: (err?: Error) => void): void {
    this.#abort = abort
  }

  onHeaders (statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true // 1xx informational: not relayed
    if (statusCode === 401) {
      this.#o.tokens.rejected(this.#authorization)
      if (!this.#replayed && !this.#client.hasBody) {
        this.#replaying = true
        this.#replayed = true
        return true
      }
    }
    const res = this.#res
    if (statusCode > 599) {
      this.#o.log.warn({ requestId: this.#requestId, upstreamStatus: statusCode }, 'upstream answered an invalid status code')
      this.#abort?.(new Error('invalid status code'))
      sendError(res, this.#requestId, 'upstream_unreachable')
      return false
    }
    try {
      res.writeHead(statusCode, responseHeaders(rawHeaders, this.#requestId))
    } catch {
      this.#o.log.warn({ requestId: this.#requestId }, 'upstream answered headers that cannot be relayed')
      this.#abort?.(new Error('invalid response headers'))
      sendError(res, this.#requestId, 'upstream_unreachable')
      return false
    }
    this.#resume = resume
    return true
  }

  onData (chunk: Buffer): boolean {
    if (this.#replaying) return true
    const held = this.#held
    if (held === undefined) {
      this.#held = chunk
      return true
    }
    this.#held = EMPTY
    if (held !== EMPTY) this.#res.write(held)
    if (this.#res.write(chunk)) return true
    // the client reads slower than the upstream sends: pause until it drains
    this.#res.once('drain', this.#resume!)
    return false
  }

  onComplete (): void {
    if (this.#replaying) {
      // the rejected token's answer is dropped; the same request goes again with a new token
      this.#o.tokens.authorization().then((h) => this.send(h), (err: unknown) => this.unavailable(err))
      return
    }
    this.#ended = true
    const held = this.#held
    if (held === undefined || held === EMPTY) this.#res.end()
    else this.#res.end(held)
  }

  onError (err: Error & { code?: string }): void {
    const res = this.#res
    if (res.destroyed || this.#ended) return
    if (res.headersSent) {
      // mid-body: the client must not take a cut answer for a whole one
      this.#o.log.warn({ requestId: this.#requestId, upstreamError: err.code ?? err.name }, 'upstream failed during the response')
      res.destroy(err)
      return
    }
    if (this.#attempt === 1 && STALE_SOCKET_ERRORS.has(err.code ?? '') && !this.#client.hasBody && RETRYABLE_METHODS.has(this.#req.method ?? '')) {
      this.send(this.#authorization)
      return
    }
    const code: ErrorCode = err.code === 'UND_ERR_HEADERS_TIMEOUT' ? 'upstream_timeout' : 'upstream_unreachable'
    this.#o.log.warn({ requestId: this.#requestId, upstreamError: err.code ?? err.name }, 'upstream request failed')
    sendError(res, this.#requestId, code)
  }
}

function sendError (res: ServerResponse, requestId: string, code: ErrorCode, status: number = ERRORS[code].status, retryAfter?: string): void {
  if (res.headersSent || res.destroyed) return
  const body = errorBody(code)
  const headers = ['content-type', 'application/json; charset=utf-8', 'content-length', String(Buffer.byteLength(body)), 'x-request-id', requestId]
  if (retryAfter !== undefined) headers.push('retry-after', retryAfter)
  res.writeHead(status, headers)
  res.end(body)
}
