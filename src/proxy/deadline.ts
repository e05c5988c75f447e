import { errors, type Dispatcher } from 'undici'

type Handler = Dispatcher.DispatchHandler
type Controller = Parameters<NonNullable<Handler['onRequestStart']>>[0]

/**
 * An undici interceptor: a request gets its response headers within `ms` of
 * being dispatched, or fails with undici's own HeadersTimeoutError (the
 * proxy's 504). undici's headersTimeout starts only once a request is
 * written to a socket, so with every pooled connection busy, the time spent
 * waiting for one would not count. A request still queued when its time is
 * up is answered at once and aborted as soon as undici hands it a
 * connection, so it never reaches the upstream.
 */
export function responseDeadline (ms: number): Dispatcher.DispatcherComposeInterceptor {
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
