import type { ServerResponse } from 'node:http'
import type { Readable } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { errors, type Dispatcher } from 'undici'
import type { Authorization } from '../token/credential.js'
import { upstreamFailure, type ProxyContext } from './context.js'
import { forwardedHeaders, relayedResponseHeaders } from './headers.js'
import { sendError, sendTokenUnavailable } from './replies.js'
import type { Release } from './upstream-slots.js'

/** Idempotent methods without a body may be sent again when a pooled socket turned out dead. */
const RETRYABLE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS'])
/** The errors of a kept-alive socket that the upstream closed under the request. */
const STALE_SOCKET_ERRORS = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE'])
/** Interim (1xx) answers taken before the final one; an upstream that sends more is failing. */
export const MAX_INTERIM_ANSWERS = 8

/** The client's connection closed: nothing more is sent for it. */
export class ClientGoneError extends Error {
  readonly code = 'AUTH_SIDECAR_CLIENT_GONE'
  constructor () {
    super('the client closed the connection')
    this.name = 'ClientGoneError'
  }
}

/** The upstream sent more interim answers than MAX_INTERIM_ANSWERS. */
export class InterimFloodError extends Error {
  readonly code = 'AUTH_SIDECAR_INTERIM_FLOOD'
  constructor () {
    super(`the upstream sent more than ${MAX_INTERIM_ANSWERS} interim (1xx) answers`)
    this.name = 'InterimFloodError'
  }
}

/**
 * One HTTP request through a route to its upstream, on undici's request API:
 * - it waits for a free place in the upstream pool (UpstreamSlots); its
 *   client's departure, or UPSTREAM_TIMEOUT_MS counted from its arrival to
 *   the upstream's final status (interim 1xx answers do not restart it),
 *   takes it out of the queue unsent, or aborts it;
 * - its headers are the client's less what must not travel, with the
 *   route's authorization; in DPoP mode each attempt gets its proof for
 *   exactly the method and URL it goes to;
 * - a stale pooled socket is retried once for a bodiless idempotent request;
 * - every answer is reported to the credential; after a 401 a request
 *   without a body is sent once more when it says so (with a new token, or
 *   the nonce the upstream asked for);
 * - failures are the sidecar's JSON 502 or 504, never internal detail.
 */
export function forward (request: FastifyRequest, reply: FastifyReply, o: ProxyContext): void {
  new Exchange(request, reply, o).start()
}

class Exchange {
  readonly #request: FastifyRequest
  readonly #reply: FastifyReply
  readonly #o: ProxyContext
  readonly #abort = new AbortController()
  readonly #method: string
  /** the upstream path without the query, and the query */
  readonly #path: string
  readonly #query: string
  readonly #body: Readable | undefined
  #deadline: NodeJS.Timeout | undefined
  #unwatch: () => void = () => {}
  #release: Release = () => {}
  #interim = 0

  constructor (request: FastifyRequest, reply: FastifyReply, o: ProxyContext) {
    this.#request = request
    this.#reply = reply
    this.#o = o
    this.#method = request.raw.method ?? 'GET'
    const url = request.raw.url ?? '/'
    const q = url.indexOf('?')
    this.#path = o.route.basePath + routePath(q === -1 ? url : url.slice(0, q), o.route.prefix)
    this.#query = q === -1 ? '' : url.slice(q)
    this.#body = request.body as Readable | undefined
  }

  start (): void {
    this.#arm()
    this.#unwatch = this.#o.admission.onDeparture(this.#request, () => this.#abort.abort(new ClientGoneError()))
    this.#o.slots.acquire(this.#abort.signal)
      .then(async (release) => {
        this.#release = release
        await this.#send(this.#request.sidecarAuthorization!)
      })
      .catch((err: unknown) => this.#failed(err))
      .finally(() => {
        clearTimeout(this.#deadline)
        this.#unwatch()
      })
  }

  /** UPSTREAM_TIMEOUT_MS until the final status. */
  #arm (): void {
    this.#deadline = setTimeout(() => this.#abort.abort(new errors.HeadersTimeoutError()), this.#o.route.timeoutMs)
  }

  async #send (authorization: Authorization, replayed = false): Promise<void> {
    const res = await this.#dispatch(authorization)
    clearTimeout(this.#deadline)
    const verdict = this.#o.credential.answered(authorization, res.statusCode, res.headers['www-authenticate'], res.headers['dpop-nonce'])
    if (res.statusCode !== 401 || verdict === 'relay' || replayed || this.#body !== undefined) return this.#relay(res)
    await res.body.dump()
    let next = authorization
    if (verdict === 'renewed') {
      try {
        next = await this.#o.credential.authorize()
      } catch (err) {
        this.#release()
        return sendTokenUnavailable(this.#reply, err)
      }
    }
    this.#arm()
    await this.#send(next, true)
  }

  /** One request upstream; a stale pooled socket is tried once more when that is safe. */
  async #dispatch (authorization: Authorization): Promise<Dispatcher.ResponseData> {
    const { route } = this.#o
    const options = (): Dispatcher.RequestOptions => ({
      origin: route.origin,
      path: this.#path + this.#query,
      method: this.#method as Dispatcher.HttpMethod,
      headers: forwardedHeaders(this.#request.raw.rawHeaders, {
        authorization: authorization.header,
        dpop: authorization.prove?.(this.#method, route.origin + this.#path),
        host: route.host,
        requestId: this.#request.id,
        clientIp: this.#request.raw.socket.remoteAddress,
        withoutBody: this.#body === undefined,
        handshake: false
      }),
      body: this.#body ?? null,
      signal: this.#abort.signal,
      onInfo: () => { if (++this.#interim > MAX_INTERIM_ANSWERS) this.#abort.abort(new InterimFloodError()) }
    })
    try {
      return await this.#o.dispatcher.request(options())
    } catch (err) {
      const code = (err as { code?: string }).code ?? ''
      if (this.#abort.signal.aborted || !STALE_SOCKET_ERRORS.has(code) || !RETRYABLE_METHODS.has(this.#method) || this.#body !== undefined) throw err
      return await this.#o.dispatcher.request(options())
    }
  }

  /** The upstream's answer to the client: its status, headers and body, streamed. */
  #relay (res: Dispatcher.ResponseData): void {
    const request = this.#request
    const reply = this.#reply
    const { route, log, events } = this.#o
    res.body.once('close', this.#release)
    if (res.statusCode < 200 || res.statusCode > 599) {
      res.body.on('error', () => {}).destroy()
      log.warn({ requestId: request.id, route: route.name, upstreamStatus: res.statusCode }, 'upstream answered with an invalid status')
      events.emit('upstream_error', { route: route.name, reason: 'unreachable', code: 'invalid_status' })
      return sendError(reply, 'upstream_unreachable')
    }
    res.body.once('error', (err: Error & { code?: string }) => {
      // the client may have left first, which destroys this stream too
      if (isClientGone(reply.raw)) return
      // once the client has the upstream's status, the failure can only cut the body
      request.sidecarUpstreamFailed = reply.raw.headersSent
      log.warn({ requestId: request.id, route: route.name, upstreamError: err.code ?? err.name }, 'upstream closed the connection in the middle of its answer')
      // UPSTREAM_IDLE_TIMEOUT_MS: the upstream fell silent
      events.emit('upstream_error', { route: route.name, reason: err.code === 'UND_ERR_BODY_TIMEOUT' ? 'timeout' : 'reset', code: err.code ?? err.name })
    })
    reply.code(res.statusCode)
    reply.headers(relayedResponseHeaders(res.headers, request.id))
    reply.send(res.body)
    // Fastify writes the headers with the first chunk of the body: an
    // event stream's client would wait for its first event to see them.
    if (String(res.headers['content-type']).startsWith('text/event-stream')) reply.raw.flushHeaders()
  }

  /** A failure before the upstream's answer began: the sidecar's 502 or 504, or nothing when the client has gone. */
  #failed (err: unknown): void {
    this.#release()
    const cause = this.#abort.signal.aborted ? this.#abort.signal.reason as unknown : err
    if (cause instanceof ClientGoneError || isClientGone(this.#reply.raw)) return
    const failure = upstreamFailure(cause)
    this.#o.log.warn({ requestId: this.#request.id, route: this.#o.route.name, upstreamError: failure.code }, 'upstream request failed')
    this.#o.events.emit('upstream_error', { route: this.#o.route.name, ...failure })
    sendError(this.#reply, failure.reason === 'timeout' ? 'upstream_timeout' : 'upstream_unreachable')
  }
}

/** A path as its route forwards it: without the route's prefix, always starting with a slash. */
export function routePath (path: string, prefix: string): string {
  const rest = path.slice(prefix.length)
  return rest.startsWith('/') ? rest : `/${rest}`
}

/** Whether the client's connection is gone, its answer unfinished. */
export function isClientGone (res: ServerResponse): boolean {
  return res.destroyed && !res.writableFinished
}
