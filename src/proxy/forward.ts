import type { IncomingHttpHeaders } from 'node:http'
import { Readable } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Dispatcher } from 'undici'
import type { Authorization } from '../token/credential.js'
import { Attempt, type Transport } from './attempt.js'
import type { ProxyContext, UpstreamConnection } from './context.js'
import { ClientGoneError, InterimFloodError, InvalidStatusError, NotRelayedError } from '../errors.js'
import { isClientGone, MAX_INTERIM_ANSWERS, upstreamFailure } from './failures.js'
import { forwardedHeaders, relayedResponseHeaders, schemeOf } from './headers.js'
import { sendError } from './replies.js'
import type { UpstreamTarget } from './target.js'

/** Idempotent methods without a body may be sent again when a pooled socket turned out dead. */
const RETRYABLE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS'])
/** The errors of a kept-alive socket that the upstream closed under the request. */
const STALE_SOCKET_ERRORS = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE'])

/**
 * One HTTP request through a route to its upstream, as a handler of
 * undici's dispatcher (its current interface), its policy the attempt's
 * (attempt.ts: deadline, departure, a place, the authorization, the 401):
 * - its headers are the client's less what must not travel, with the
 *   route's authorization; in DPoP mode each try gets its proof for exactly
 *   the method and URL it goes to;
 * - a stale pooled socket is retried once for a bodiless idempotent request;
 * - at most MAX_INTERIM_ANSWERS interim (1xx) answers are taken;
 * - the answer is streamed to the client with backpressure; a failure
 *   before it is the sidecar's JSON 502 or 504, never internal detail.
 */
export function forward (request: FastifyRequest, reply: FastifyReply, o: ProxyContext, target: UpstreamTarget): void {
  new Exchange(request, reply, o, target).start()
}

class Exchange implements Dispatcher.DispatchHandler, Transport {
  readonly #request: FastifyRequest
  readonly #reply: FastifyReply
  readonly #o: ProxyContext
  readonly #attempt: Attempt
  readonly #method: string
  readonly #target: UpstreamTarget
  readonly #body: Readable | undefined
  #interim = 0
  /** the answer's body, once the upstream's final status came */
  #answer: UpstreamBody | undefined

  constructor (request: FastifyRequest, reply: FastifyReply, o: ProxyContext, target: UpstreamTarget) {
    this.#request = request
    this.#reply = reply
    this.#o = o
    this.#method = request.raw.method ?? 'GET'
    this.#target = target
    this.#body = request.body as Readable | undefined
    this.#attempt = new Attempt(request, reply, o, this, { replayable: this.#body === undefined, failedAs: 'upstream request failed', path: target.path })
  }

  start (): void {
    this.#attempt.start()
  }

  send (authorization: Authorization, connection: UpstreamConnection, trace: Readonly<Record<string, string>> | undefined): void {
    const { route } = this.#o
    const { path, query } = this.#target
    this.#interim = 0
    const headers = forwardedHeaders(this.#request.raw.rawHeaders, {
      authorization: authorization.header,
      dpop: authorization.prove?.(this.#method, route.origin + path),
      host: route.host,
      requestId: this.#request.id,
      clientIp: this.#request.raw.socket.remoteAddress,
      withoutBody: this.#body === undefined,
      handshake: false,
      proto: schemeOf(this.#request.raw.socket),
      trace
    })
    connection.dispatcher.dispatch({
      origin: route.origin,
      path: path + query,
      method: this.#method as Dispatcher.HttpMethod,
      headers,
      body: this.#body ?? null
    }, this)
  }

  onRequestStart (controller: Dispatcher.DispatchController): void {
    this.#attempt.underway((reason) => controller.abort(reason))
  }

  onResponseStart (controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    if (statusCode < 200 && statusCode > 0) {
      if (++this.#interim > MAX_INTERIM_ANSWERS) controller.abort(new InterimFloodError(MAX_INTERIM_ANSWERS))
      return
    }
    if (this.#attempt.answered(statusCode, headers['www-authenticate'], headers['dpop-nonce']) === 'replayed') {
      // the 401's body is not wanted; its connection goes with it
      return controller.abort(new NotRelayedError())
    }
    this.#relay(controller, statusCode, headers)
  }

  onResponseData (controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#answer?.push(chunk) === false) controller.pause()
  }

  onResponseEnd (): void {
    this.#answer?.push(null)
    this.#attempt.finish()
  }

  onResponseError (_controller: Dispatcher.DispatchController, err: Error): void {
    if (err instanceof NotRelayedError) return
    const answer = this.#answer
    // undici holds a 304's Content-Length for a body owed, though it gives the
    // length of the representation the 304 stands for (RFC 9110 §8.6): the answer is whole
    if (answer !== undefined && this.#reply.statusCode === 304 && (err as { code?: string }).code === 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH') return this.onResponseEnd()
    if (answer === undefined) {
      // a stale pooled socket, once, for a request that can be sent again as it is
      const code = (err as { code?: string }).code ?? ''
      if (this.#attempt.tries === 1 && STALE_SOCKET_ERRORS.has(code) && RETRYABLE_METHODS.has(this.#method) && this.#body === undefined && this.#attempt.abandoned === undefined) {
        return this.#attempt.resend(err)
      }
      return this.#attempt.failed(err)
    }
    this.#attempt.finish(err)
    // the client may have left first, which aborted this answer
    if (!isClientGone(this.#reply.raw) && !(err instanceof ClientGoneError)) {
      // once the client has the upstream's status, the failure can only cut the body
      this.#request.sidecarUpstreamFailed = this.#reply.raw.headersSent
      const failure = upstreamFailure(err)
      this.#o.log.warn({ requestId: this.#request.id, route: this.#o.route.name, upstreamError: failure.code }, 'upstream closed the connection in the middle of its answer')
      // UPSTREAM_IDLE_TIMEOUT_MS: the upstream fell silent
      this.#o.events.emit('upstream_error', { route: this.#o.route.name, reason: failure.code === 'UND_ERR_BODY_TIMEOUT' ? 'timeout' : 'reset', code: failure.code })
    }
    answer.destroy(err)
  }

  /** The upstream's answer to the client: its status, headers and body, streamed. */
  #relay (controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    const request = this.#request
    const reply = this.#reply
    if (statusCode < 200 || statusCode > 599) {
      controller.abort(new NotRelayedError())
      const failure = new InvalidStatusError(statusCode)
      this.#attempt.finish(failure)
      this.#o.log.warn({ requestId: request.id, route: this.#o.route.name, upstreamStatus: statusCode }, 'upstream answered with an invalid status')
      this.#o.events.emit('upstream_error', { route: this.#o.route.name, reason: 'unreachable', code: failure.code })
      return sendError(reply, 'upstream_unreachable')
    }
    this.#attempt.answering()
    const answer = this.#answer = new UpstreamBody(controller)
    reply.code(statusCode)
    reply.headers(relayedResponseHeaders(headers, request.id))
    reply.send(answer)
    // Fastify writes the headers with the first chunk of the body: an
    // event stream's client would wait for its first event to see them.
    if (String(headers['content-type']).startsWith('text/event-stream')) reply.raw.flushHeaders()
  }
}

/** An upstream answer's body as the client's reply streams it: read on demand, its end or its abort undici's. */
class UpstreamBody extends Readable {
  readonly #controller: Dispatcher.DispatchController

  constructor (controller: Dispatcher.DispatchController) {
    super()
    this.#controller = controller
  }

  override _read (): void {
    this.#controller.resume()
  }

  override _destroy (err: Error | null, callback: (err?: Error | null) => void): void {
    // the client went before the end: the upstream request goes too
    if (!this.readableEnded && !this.#controller.aborted) this.#controller.abort(err ?? new ClientGoneError())
    callback(err)
  }
}
