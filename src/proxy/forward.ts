import type { IncomingHttpHeaders, ServerResponse } from 'node:http'
import { Readable } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { errors, type Dispatcher } from 'undici'
import { refusesCertificate } from '../tls/certificate.js'
import type { Authorization } from '../token/credential.js'
import { Admission } from './admission.js'
import { forConnection } from './authorize.js'
import { upstreamFailure, type ProxyContext } from './context.js'
import { forwardedHeaders, relayedResponseHeaders } from './headers.js'
import { sendError, sendTokenUnavailable } from './replies.js'
import type { UpstreamTarget } from './target.js'
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
 * One HTTP request through a route to its upstream, as a handler of
 * undici's dispatcher (its current interface):
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
 * - the answer is streamed to the client with backpressure; failures are
 *   the sidecar's JSON 502 or 504, never internal detail.
 */
export function forward (request: FastifyRequest, reply: FastifyReply, o: ProxyContext, target: UpstreamTarget): void {
  new Exchange(request, reply, o, target).start()
}

class Exchange implements Dispatcher.DispatchHandler {
  readonly #request: FastifyRequest
  readonly #reply: FastifyReply
  readonly #o: ProxyContext
  readonly #method: string
  /** the upstream path without the query, and the query */
  readonly #path: string
  readonly #query: string
  readonly #body: Readable | undefined
  #authorization: Authorization
  #deadline: NodeJS.Timeout | undefined
  #unwatch: () => void = noop
  #leaveQueue: (() => void) | undefined
  #release: Release = noop
  /** the attempt under way: undici's control of it, once it has a connection */
  #controller: Dispatcher.DispatchController | undefined
  /** why the exchange was given up, once it was */
  #abandoned: Error | undefined
  #attempt = 0
  #replayed = false
  /** the token was replaced once because its certificate was */
  #restaled = false
  #interim = 0
  /** the answer's body, once the upstream's final status came */
  #answer: UpstreamBody | undefined
  #over = false

  constructor (request: FastifyRequest, reply: FastifyReply, o: ProxyContext, target: UpstreamTarget) {
    this.#request = request
    this.#reply = reply
    this.#o = o
    this.#method = request.raw.method ?? 'GET'
    this.#path = target.path
    this.#query = target.query
    this.#body = request.body as Readable | undefined
    this.#authorization = request.sidecarAuthorization!
  }

  start (): void {
    this.#arm()
    this.#unwatch = this.#o.admission.onDeparture(this.#request, () => {

      this.#abandon(new ClientGoneError())
    })
    const release = this.#o.slots.take()
    if (release !== undefined) return this.#send(release)
    this.#leaveQueue = this.#o.slots.wait((granted) => {
      this.#leaveQueue = undefined
      this.#send(granted)
    }, () => Admission.hasLeft(this.#request))
  }

  /** UPSTREAM_TIMEOUT_MS until the final status. */
  #arm (): void {
    this.#deadline = setTimeout(() => this.#abandon(new errors.HeadersTimeoutError()), this.#o.route.timeoutMs)
  }

  #send (release: Release): void {
    this.#release = release
    this.#dispatch()
  }

  #dispatch (): void {
    const { route, upstream } = this.#o
    this.#controller = undefined
    const unusable = upstream.unusable()
    if (unusable !== undefined) return this.#failed(new CertificateUnusableError(unusable))
    this.#authorization = forConnection(this.#authorization, upstream, this.#o.credential)
    const dispatcher = upstream.for(this.#authorization.certificate)
    if (dispatcher === undefined) return this.#reauthorize()
    try {
      dispatcher.dispatch({
        origin: route.origin,
        path: this.#path + this.#query,
        method: this.#method as Dispatcher.HttpMethod,
        headers: forwardedHeaders(this.#request.raw.rawHeaders, {
          authorization: this.#authorization.header,
          dpop: this.#authorization.prove?.(this.#method, route.origin + this.#path),
          host: route.host,
          requestId: this.#request.id,
          clientIp: this.#request.raw.socket.remoteAddress,
          withoutBody: this.#body === undefined,
          handshake: false
        }),
        body: this.#body ?? null
      }, this)
    } catch (err) {
      this.#failed(err)
    }
  }

  /**
   * The token was obtained with a client certificate whose connections are
   * closed (the files were renewed since): a bound token is never sent with
   * another certificate, so the current token goes instead, once.
   */
  #reauthorize (): void {
    if (this.#restaled) return this.#failed(new CertificateUnusableError('the token is bound to a client certificate that was replaced'))
    this.#restaled = true
    this.#o.credential.authorize().then((next) => {
      this.#authorization = next
      if (this.#abandoned !== undefined) return this.#failed(this.#abandoned)
      this.#dispatch()
    }, (err: unknown) => {
      this.#finish()
      sendTokenUnavailable(this.#reply, err)
    })
  }

  /** The client left, or the time is up: out of the queue, or the attempt aborted. */
  #abandon (reason: Error): void {
    if (this.#abandoned !== undefined || this.#answer !== undefined) return
    this.#abandoned = reason
    if (this.#leaveQueue !== undefined) {
      this.#leaveQueue()
      this.#leaveQueue = undefined
      return this.#failed(reason)
    }
    // still connecting: aborted when undici starts it
    if (this.#controller === undefined) return this.#failed(reason)
    // between an answered 401 and its replay: the replay does not go
    if (this.#replayed && this.#controller.aborted) return
    this.#controller.abort(reason)
  }

  onRequestStart (controller: Dispatcher.DispatchController): void {
    this.#controller = controller
    if (this.#abandoned !== undefined) controller.abort(this.#abandoned)
  }

  onResponseStart (controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    if (statusCode < 200 && statusCode > 0) {
      if (++this.#interim > MAX_INTERIM_ANSWERS) controller.abort(new InterimFloodError())
      return
    }
    clearTimeout(this.#deadline)
    const verdict = this.#o.credential.answered(this.#authorization, statusCode, headers['www-authenticate'], headers['dpop-nonce'])
    if (statusCode === 401 && verdict !== 'relay' && !this.#replayed && this.#body === undefined) {
      this.#replayed = true
      // the 401's body is not wanted; its connection goes with it
      controller.abort(new ReplayedError())
      if (verdict === 'replay') return this.#again()
      this.#o.credential.authorize().then((next) => {
        this.#authorization = next
        this.#again()
      }, (err: unknown) => {
        this.#finish()
        sendTokenUnavailable(this.#reply, err)
      })
      return
    }
    this.#relay(controller, statusCode, headers)
  }

  /** A replay: a fresh proof (it carries the nonce now), within a new UPSTREAM_TIMEOUT_MS. */
  #again (): void {
    if (this.#abandoned !== undefined) return this.#failed(this.#abandoned)
    this.#arm()
    this.#dispatch()
  }

  onResponseData (controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#answer?.push(chunk) === false) controller.pause()
  }

  onResponseEnd (): void {
    this.#answer?.push(null)
    this.#finish()
  }

  onResponseError (_controller: Dispatcher.DispatchController, err: Error): void {
    if (err instanceof ReplayedError) return
    const answer = this.#answer
    // undici holds a 304's Content-Length for a body owed, though it gives the
    // length of the representation the 304 stands for (RFC 9110 §8.6): the answer is whole
    if (answer !== undefined && this.#reply.statusCode === 304 && (err as { code?: string }).code === 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH') return this.onResponseEnd()
    if (answer === undefined) {
      // a stale pooled socket, once, for a request that can be sent again as it is
      const code = (err as { code?: string }).code ?? ''
      if (this.#attempt++ === 0 && this.#abandoned === undefined && STALE_SOCKET_ERRORS.has(code) && RETRYABLE_METHODS.has(this.#method) && this.#body === undefined) {
        return this.#dispatch()
      }
      return this.#failed(this.#abandoned ?? err)
    }
    this.#finish()
    // the client may have left first, which aborted this answer
    if (!isClientGone(this.#reply.raw) && this.#abandoned === undefined) {
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
      controller.abort(new ReplayedError())
      this.#finish()
      this.#o.log.warn({ requestId: request.id, route: this.#o.route.name, upstreamStatus: statusCode }, 'upstream answered with an invalid status')
      this.#o.events.emit('upstream_error', { route: this.#o.route.name, reason: 'unreachable', code: 'invalid_status' })
      return sendError(reply, 'upstream_unreachable')
    }
    this.#unwatch()
    const answer = this.#answer = new UpstreamBody(controller)
    reply.code(statusCode)
    reply.headers(relayedResponseHeaders(headers, request.id))
    reply.send(answer)
    // Fastify writes the headers with the first chunk of the body: an
    // event stream's client would wait for its first event to see them.
    if (String(headers['content-type']).startsWith('text/event-stream')) reply.raw.flushHeaders()
  }

  /** A failure before the upstream's answer began: the sidecar's 502 or 504, or nothing when the client has gone. */
  #failed (err: unknown): void {
    if (this.#over) return
    this.#finish()
    if (err instanceof ClientGoneError || isClientGone(this.#reply.raw)) return
    answerUpstreamFailure(this.#o, this.#reply, this.#request.id, err, 'upstream request failed')
  }

  /** The exchange with the upstream is over: its place in the pool given back. */
  #finish (): void {
    this.#over = true
    clearTimeout(this.#deadline)
    this.#unwatch()
    this.#release()
  }
}

/**
 * A failure before the upstream's answer, of a request or a WebSocket
 * handshake: logged (a client certificate that cannot be presented, or that
 * the upstream refused, named as such, else as `failed`), counted, and
 * answered 502 or 504.
 */
export function answerUpstreamFailure (o: ProxyContext, reply: FastifyReply, requestId: string, err: unknown, failed: string): void {
  const failure = upstreamFailure(err)
  const fields = { requestId, route: o.route.name, upstreamError: failure.code }
  if (err instanceof CertificateUnusableError) {
    o.log.warn({ ...fields, reason: err.message }, 'upstream request not sent: the client certificate cannot be presented')
  } else if (refusesCertificate(failure.code) || o.upstream.refusal() !== undefined) {
    o.log.warn({ ...fields, tlsAlert: o.upstream.refusal() ?? failure.code, certificate: o.upstream.subject ?? null }, o.upstream.subject === undefined
      ? 'the upstream requires a client certificate: set UPSTREAM_TLS_CERT_FILE and UPSTREAM_TLS_KEY_FILE'
      : 'the upstream refused the client certificate')
  } else {
    o.log.warn(fields, failed)
  }
  o.events.emit('upstream_error', { route: o.route.name, ...failure })
  sendError(reply, failure.reason === 'timeout' ? 'upstream_timeout' : 'upstream_unreachable')
}

/** An attempt the sidecar ends itself (to send it again, or an answer it will not relay). */
class ReplayedError extends Error {}

/** The route's client certificate cannot be presented (expired, not yet valid, replaced): nothing is sent. */
export class CertificateUnusableError extends Error {
  readonly code = 'AUTH_SIDECAR_CERTIFICATE_UNUSABLE'
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

/** Whether the client's connection is gone, its answer unfinished. */
export function isClientGone (res: ServerResponse): boolean {
  return res.destroyed && !res.writableFinished
}

function noop (): void {}
