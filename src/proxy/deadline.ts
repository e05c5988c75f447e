import { Dispatcher, errors } from 'undici'

type Handler = Dispatcher.DispatchHandler
type Controller = Parameters<NonNullable<Handler['onRequestStart']>>[0]

/**
 * The upstream dispatcher, with the wait for a free pooled connection counted
 * against UPSTREAM_TIMEOUT_MS (SPEC §10.5).
 *
 * Why: undici's headersTimeout starts once a request is written to a socket,
 * so with every connection busy, time spent in the pool's queue did not
 * count: 400 requests to an upstream that never answers, 128 connections, a
 * 2 s timeout, and the last ones were answered after 10 s.
 *
 * Why only while the pool is busy: a deadline on every request (this
 * interceptor through `pool.compose(...)`, which answers with a Proxy over
 * the pool and wraps every handler) cost 12% of a request's CPU in paired
 * runs (docs/performance.md). A request can only queue when the
 * pool said it had no free connection: `dispatch` returns false from then
 * until the pool emits 'drain' (undici's own back-pressure signal, public
 * API). Requests dispatched in that window get the deadline; the others go
 * straight to the pool, where undici's headersTimeout, started a few
 * microseconds after arrival, is the same deadline.
 */
export class QueueDeadlineDispatcher extends Dispatcher {
  readonly #pool: Dispatcher
  readonly #guarded: Dispatcher['dispatch']
  #busy = false

  constructor (pool: Dispatcher, ms: number) {
    super()
    this.#pool = pool
    this.#guarded = pool.compose(responseDeadline(ms)).dispatch
    pool.on('drain', () => { this.#busy = false })
  }

  override dispatch (opts: Dispatcher.DispatchOptions, handler: Handler): boolean {
    const free = this.#busy ? this.#guarded(opts, handler) : this.#pool.dispatch(opts, handler)
    // A pool can become free again without a 'drain' (a connection removed):
    // every dispatch says what it is now.
    this.#busy = !free
    return free
  }

  override close (): Promise<void>
  override close (callback: () => void): void
  override close (callback?: () => void): Promise<void> | void {
    return callback === undefined ? this.#pool.close() : this.#pool.close(callback)
  }

  override destroy (): Promise<void>
  override destroy (err: Error | null): Promise<void>
  override destroy (callback: () => void): void
  override destroy (err: Error | null, callback: () => void): void
  override destroy (a?: Error | null | (() => void), b?: () => void): Promise<void> | void {
    if (typeof a === 'function') return this.#pool.destroy(a)
    if (b !== undefined) return this.#pool.destroy(a ?? null, b)
    return this.#pool.destroy(a ?? null)
  }
}

/**
 * An undici interceptor: a request gets its response headers within `ms` of
 * being dispatched, or fails with undici's own HeadersTimeoutError (the
 * proxy's 504). A request still queued when its time is up is answered at
 * once and aborted as soon as undici hands it a connection, so it never
 * reaches the upstream.
 */
function responseDeadline (ms: number): Dispatcher.DispatcherComposeInterceptor {
  return (dispatch) => (opts, handler) => dispatch(opts, new DeadlineHandler(handler, ms))
}

class DeadlineHandler implements Handler {
  readonly #handler: Handler
  readonly #timer: NodeJS.Timeout
  #controller: Controller | undefined
  /** the time ran out while the request was still queued, and the caller was told */
  #reported = false

  constructor (handler: Handler, ms: number) {
    this.#handler = handler
    this.#timer = setTimeout(() => this.#expire(), ms)
  }

  /** Runs only before the response starts: its start clears the timer. */
  #expire (): void {
    const err = new errors.HeadersTimeoutError()
    if (this.#controller !== undefined) {
      this.#controller.abort(err)
    } else {
      // still queued: nobody can abort it yet, so the caller hears now
      this.#reported = true
      this.#handler.onResponseError?.(undefined as unknown as Controller, err)
    }
  }

  onRequestStart (controller: Controller, context: unknown): void {
    this.#controller = controller
    if (this.#reported) {
      controller.abort(new errors.HeadersTimeoutError())
      return
    }
    this.#handler.onRequestStart?.(controller, context)
  }

  onRequestUpgrade (controller: Controller, statusCode: number, headers: Record<string, string | string[]>, socket: import('node:stream').Duplex): void {
    clearTimeout(this.#timer)
    this.#handler.onRequestUpgrade?.(controller, statusCode, headers, socket)
  }

  onResponseStart (controller: Controller, statusCode: number, headers: Record<string, string | string[]>, statusMessage?: string): void {
    clearTimeout(this.#timer)
    this.#handler.onResponseStart?.(controller, statusCode, headers, statusMessage)
  }

  onResponseData (controller: Controller, chunk: Buffer): void {
    this.#handler.onResponseData?.(controller, chunk)
  }

  onResponseEnd (controller: Controller, trailers: Record<string, string | string[]>): void {
    this.#handler.onResponseEnd?.(controller, trailers)
  }

  onResponseError (controller: Controller, err: Error): void {
    clearTimeout(this.#timer)
    if (this.#reported) return // heard of the timeout already, while queued
    this.#handler.onResponseError?.(controller, err)
  }
}
