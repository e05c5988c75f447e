import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Authorization, HeaderValue } from '../token/credential.js'
import { Admission } from './admission.js'
import { forConnection } from './authorize.js'
import type { ProxyContext, UpstreamConnection } from './context.js'
import { CertificateUnusableError, ClientGoneError, UpstreamTimeoutError } from '../errors.js'
import { answerUpstreamFailure, isClientGone, upstreamFailure } from './failures.js'
import { sendTokenUnavailable } from './replies.js'
import type { Release } from './upstream-slots.js'
import type { UpstreamSpan } from '../tracing/tracing.js'

/** How an attempt's tries go to the upstream: an undici dispatch for a request, a WebSocket client for a handshake. */
export interface Transport {
  /**
   * Sends one try with `authorization` over `connection`, with the try's
   * trace headers (when tracing is on); its outcome comes back through the
   * attempt.
   */
  send(authorization: Authorization, connection: UpstreamConnection, trace: Readonly<Record<string, string>> | undefined): void
}

/**
 * What the proxy does for each request and WebSocket handshake that reaches
 * a route, before the upstream's final answer, whichever transport carries
 * it:
 * - UPSTREAM_TIMEOUT_MS, counted from the request's arrival to the
 *   upstream's final status (interim answers do not restart it; a replay
 *   has its own);
 * - the client's departure, which takes a queued request out unsent and
 *   cuts a try under way;
 * - a place among the route's upstream connections (UpstreamSlots);
 * - the authorization and the connections it goes over: a certificate-bound
 *   token only where its certificate is presented, a token whose
 *   certificate was replaced giving way to the current one, once;
 * - the upstream's 401, reported to the credential: one replay when it says
 *   so and the request has no body (with a new token, or the nonce the
 *   upstream asked for);
 * - a failure answered 502 or 504 (failures.ts), unless the client has gone;
 * - each try's CLIENT span (tracing on): started with the try, ended once
 *   with its outcome (the final status, what failed, or both).
 */
export class Attempt {
  readonly #request: FastifyRequest
  readonly #reply: FastifyReply
  readonly #o: ProxyContext
  readonly #transport: Transport
  /** a request with a body cannot be sent again */
  readonly #replayable: boolean
  /** the log's words for a failure */
  readonly #failedAs: string
  /** the upstream path the tries go to, for their spans */
  readonly #path: string
  /** the tries sent, replays and resends included */
  #tries = 0
  /** the try under way's span, until it ends */
  #span: UpstreamSpan | undefined
  /** the try under way's final status, once it came */
  #status: number | undefined
  #authorization: Authorization
  #deadline: NodeJS.Timeout | undefined
  #unwatch: () => void = noop
  #leaveQueue: (() => void) | undefined
  #release: Release = noop
  /** what cuts the try under way, once it is */
  #cancel: ((reason: Error) => void) | undefined
  /**
   * a try handed to the transport that has not started yet (undici is
   * opening a connection for it): its place is kept until it starts or
   * fails, so that a request given up meanwhile does not pass its place on
   * while undici still holds it, and so open a connection for another
   */
  #pending = false
  /** why the attempt was given up, once it was */
  #abandoned: Error | undefined
  #replayed = false
  /** the token gave way once to the current one, its certificate having been replaced */
  #restaled = false
  #over = false

  constructor (request: FastifyRequest, reply: FastifyReply, o: ProxyContext, transport: Transport, options: { replayable: boolean, failedAs: string, path: string }) {
    this.#request = request
    this.#reply = reply
    this.#o = o
    this.#transport = transport
    this.#replayable = options.replayable
    this.#failedAs = options.failedAs
    this.#path = options.path
    this.#authorization = request.sidecarAuthorization!
  }

  /** Why the attempt was given up (the client left, the time is up); undefined while it goes on. */
  get abandoned (): Error | undefined {
    return this.#abandoned
  }

  /** How many tries were sent, the one under way included. */
  get tries (): number {
    return this.#tries
  }

  /** The attempt's authorization now: what the try under way carries. */
  get authorization (): Authorization {
    return this.#authorization
  }

  start (): void {
    this.#arm()
    this.#unwatch = this.#o.admission.onDeparture(this.#request, () => this.#abandon(new ClientGoneError()))
    const release = this.#o.slots.take()
    if (release !== undefined) return this.#granted(release)
    this.#leaveQueue = this.#o.slots.wait((granted) => {
      this.#leaveQueue = undefined
      this.#granted(granted)
    }, () => Admission.hasLeft(this.#request))
  }

  /**
   * The try is under way: `cancel` cuts it, at once should the attempt have
   * been given up already, or its client have left (its end read, its
   * departure not told yet): nothing is sent for a client that has gone.
   */
  underway (cancel: (reason: Error) => void): void {
    this.#pending = false
    this.#cancel = cancel
    if (this.#abandoned !== undefined) cancel(this.#abandoned)
    else if (!this.#over && Admission.hasLeft(this.#request)) cancel(new ClientGoneError())
    if (this.#over) this.#release()
  }

  /**
   * The upstream's final status came, with these headers: reported to the
   * credential. 'replayed' when the request is sent once more (the caller
   * drops this answer); else the caller relays it.
   */
  answered (status: number, challenge: HeaderValue, nonce: HeaderValue): 'relay' | 'replayed' {
    clearTimeout(this.#deadline)
    this.#status = status
    const verdict = this.#o.credential.answered(this.#authorization, status, challenge, nonce)
    if (status !== 401 || verdict === 'relay' || this.#replayed || !this.#replayable || this.#over) return 'relay'
    this.#endSpan()
    this.#replayed = true
    this.#cancel = undefined
    if (verdict === 'replay') {
      this.#again()
      return 'replayed'
    }
    this.#o.credential.authorize().then((next) => {
      this.#authorization = next
      this.#again()
    }, (err: unknown) => this.#tokenUnavailable(err))
    return 'replayed'
  }

  /** The answer is the client's from now on: its departure is the answer's to handle. */
  answering (): void {
    clearTimeout(this.#deadline)
    this.#unwatch()
    this.#unwatch = noop
  }

  /** The same try once more, `err` ending the last (a pooled connection the upstream had closed under it). */
  resend (err: unknown): void {
    this.#endSpan(err)
    if (this.#abandoned !== undefined) return this.failed(this.#abandoned)
    this.#try()
  }

  /** The transport's failure before the upstream's answer: the sidecar's 502 or 504, or nothing when the client has gone. */
  failed (err: unknown): void {
    this.#endSpan(err)
    // the transport no longer holds the try (a refused connect never starts)
    this.#pending = false
    if (this.#over) return this.#release()
    this.#fail(err)
  }

  /**
   * The exchange with the upstream is over: its place given back, its
   * timers and watch gone, its span ended (with `err`, when what the
   * upstream sent after its status failed or was refused).
   */
  finish (err?: unknown): void {
    this.#endSpan(err)
    this.#over = true
    clearTimeout(this.#deadline)
    this.#unwatch()
    if (!this.#pending) this.#release()
  }

  get over (): boolean {
    return this.#over
  }

  /** UPSTREAM_TIMEOUT_MS until the final status. */
  #arm (): void {
    this.#deadline = setTimeout(() => this.#abandon(new UpstreamTimeoutError()), this.#o.route.timeoutMs)
  }

  #granted (release: Release): void {
    this.#release = release
    this.#try()
  }

  #try (): void {
    const { upstream, credential } = this.#o
    this.#cancel = undefined
    // its end may have been read with the request: no connection is opened for a client that has gone
    if (Admission.hasLeft(this.#request)) return this.#abandon(new ClientGoneError())
    const unusable = upstream.unusable()
    if (unusable !== undefined) return this.failed(new CertificateUnusableError(unusable))
    this.#authorization = forConnection(this.#authorization, upstream, credential)
    const connection = upstream.connectionFor(this.#authorization.certificate)
    if (connection === undefined) return this.#reauthorize()
    try {
      this.#pending = true
      this.#status = undefined
      this.#span = this.#request.sidecarTrace?.upstream(this.#request.raw.method ?? 'GET', { origin: this.#o.route.origin, path: this.#path }, this.#tries)
      this.#tries++
      this.#transport.send(this.#authorization, connection, this.#span?.headers)
    } catch (err) {
      this.failed(err)
    }
  }

  /**
   * The token was obtained with a client certificate whose connections are
   * closed (the files were renewed since): a bound token is never sent with
   * another certificate, so the current token goes instead, once.
   */
  #reauthorize (): void {
    if (this.#restaled) return this.failed(new CertificateUnusableError('the token is bound to a client certificate that was replaced'))
    this.#restaled = true
    this.#o.credential.authorize().then((next) => {
      this.#authorization = next
      if (this.#abandoned !== undefined) return this.failed(this.#abandoned)
      this.#try()
    }, (err: unknown) => this.#tokenUnavailable(err))
  }

  /** A replay: a fresh proof (it carries the nonce now), within a new UPSTREAM_TIMEOUT_MS. */
  #again (): void {
    if (this.#abandoned !== undefined) return this.failed(this.#abandoned)
    this.#arm()
    this.#try()
  }

  /** The client left, or the time is up: out of the queue, or the try cut. */
  #abandon (reason: Error): void {
    if (this.#abandoned !== undefined || this.#over) return
    this.#abandoned = reason
    if (this.#leaveQueue !== undefined) {
      this.#leaveQueue()
      this.#leaveQueue = undefined
      return this.#fail(reason)
    }
    // not under way yet: cut when it starts (or, between a 401 and its replay, the replay does not go)
    if (this.#cancel === undefined) {
      if (!this.#replayed) this.#fail(reason)
      return
    }
    this.#cancel(reason)
  }

  /** Answers a failure, the try handed to the transport (if any) keeping its place until the transport lets it go. */
  #fail (err: unknown): void {
    if (this.#over) return
    const cause = this.#abandoned ?? err
    this.finish(cause)
    if (cause instanceof ClientGoneError || isClientGone(this.#reply.raw) || this.#request.raw.socket?.destroyed === true) return
    answerUpstreamFailure(this.#o, this.#reply, this.#request.id, cause, this.#failedAs)
  }

  #tokenUnavailable (err: unknown): void {
    if (this.#over) return
    this.finish()
    sendTokenUnavailable(this.#reply, err)
  }

  /** The try's span ends, once: with its final status if one came, and what failed if anything did. */
  #endSpan (err?: unknown): void {
    this.#span?.end(this.#status, err === undefined ? undefined : upstreamFailure(err).code)
    this.#span = undefined
  }
}

function noop (): void {}
