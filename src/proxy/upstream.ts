import type { ServerResponse } from 'node:http'
import type { Duplex } from 'node:stream'
import { Dispatcher, errors } from 'undici'

/**
 * The client's response object, carried from the proxy's header rewriting to
 * the dispatcher inside the request's headers: @fastify/reply-from copies
 * them with Object.assign, which keeps symbol keys, and undici reads only
 * string keys as headers.
 */
export const kClientResponse = Symbol('auth-sidecar.client-response')

/** The client left before its answer was complete: nothing more is sent for it. */
export class ClientGoneError extends Error {
  readonly code = 'AUTH_SIDECAR_CLIENT_GONE'
  constructor () {
    super('the client closed the connection')
    this.name = 'ClientGoneError'
  }
}

type Headers = Record<string | symbol, unknown>

/** Signs a DPoP proof for a request with `authorization` going to the upstream's `path` (no query) with `method`. */
export type Prove = (authorization: string, method: string, path: string) => string | undefined

/**
 * The upstream pool as the proxy uses it. Two things undici and
 * @fastify/reply-from do not do:
 *
 * - UPSTREAM_TIMEOUT_MS counts from the moment a request is handed over,
 *   the wait for a free pooled connection included (undici's headersTimeout
 *   starts only once the request is written to a socket);
 * - a request whose client has left is not sent, or is aborted if it was;
 * - in DPoP mode, each request (a retry or a replay too) gets its proof here,
 *   where the method and URL are those that go out, after the base path.
 *
 * A request still queued when either happens fails at once and is aborted
 * when undici hands it a connection, so it never reaches the upstream.
 */
export class UpstreamDispatcher extends Dispatcher {
  readonly #pool: Dispatcher
  readonly #timeoutMs: number
  readonly #prove: Prove | undefined

  constructor (pool: Dispatcher, timeoutMs: number, prove?: Prove) {
    super()
    this.#pool = pool
    this.#timeoutMs = timeoutMs
    this.#prove = prove
  }

  override dispatch (opts: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    const headers = opts.headers as Headers | undefined
    const client = headers?.[kClientResponse] as ServerResponse | undefined
    if (this.#prove !== undefined && headers !== undefined) {
      const query = opts.path.indexOf('?')
      const proof = this.#prove(String(headers.authorization), opts.method, query === -1 ? opts.path : opts.path.slice(0, query))
      if (proof !== undefined) headers.dpop = proof
    }
    return this.#pool.dispatch(opts, new UpstreamHandler(handler, this.#timeoutMs, client))
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

type Abort = (err?: Error) => void

/**
 * Wraps the handler undici calls as a request goes out and its answer comes
 * back. It speaks the callback set undici's client uses itself (onConnect,
 * onHeaders, ...), so that no adapter is put between them.
 */
class UpstreamHandler implements Dispatcher.DispatchHandler {
  readonly #handler: Dispatcher.DispatchHandler
  readonly #timer: NodeJS.Timeout
  readonly #client: ServerResponse | undefined
  #abort: Abort | undefined
  /** why the request was given up before undici had a connection for it; the caller was told */
  #failed: Error | undefined
  #settled = false

  constructor (handler: Dispatcher.DispatchHandler, timeoutMs: number, client: ServerResponse | undefined) {
    this.#handler = handler
    this.#timer = setTimeout(this.#expire, timeoutMs)
    this.#client = client
    if (client !== undefined) {
      if (client.destroyed) setImmediate(this.#clientGone)
      else client.once('close', this.#clientGone)
    }
  }

  readonly #expire = (): void => { this.#giveUp(new errors.HeadersTimeoutError()) }

  readonly #clientGone = (): void => {
    if (this.#client?.writableFinished !== true) this.#giveUp(new ClientGoneError())
  }

  #giveUp (err: Error): void {
    if (this.#settled) return
    if (this.#abort !== undefined) return this.#abort(err)
    // still queued: nobody can abort it yet, so the caller hears now
    this.#failed = err
    this.#settle()
    this.#handler.onError?.(err)
  }

  #settle (): void {
    this.#settled = true
    clearTimeout(this.#timer)
    this.#client?.off('close', this.#clientGone)
  }

  onConnect (abort: Abort): void {
    if (this.#failed !== undefined) return abort(this.#failed)
    this.#abort = abort
    this.#handler.onConnect?.(abort)
  }

  onHeaders (statusCode: number, headers: Buffer[], resume: () => void, statusText: string): boolean {
    clearTimeout(this.#timer)
    return this.#handler.onHeaders?.(statusCode, headers, resume, statusText) ?? true
  }

  onUpgrade (statusCode: number, headers: Buffer[] | string[] | null, socket: Duplex): void {
    this.#settle()
    this.#handler.onUpgrade?.(statusCode, headers, socket)
  }

  onResponseStarted (): void {
    this.#handler.onResponseStarted?.()
  }

  onData (chunk: Buffer): boolean {
    return this.#handler.onData?.(chunk) ?? true
  }

  onBodySent (chunkSize: number, totalBytesSent: number): void {
    this.#handler.onBodySent?.(chunkSize, totalBytesSent)
  }

  onComplete (trailers: string[] | null): void {
    this.#settle()
    this.#handler.onComplete?.(trailers)
  }

  onError (err: Error): void {
    if (this.#failed !== undefined) return // the caller heard already, while the request was queued
    this.#settle()
    this.#handler.onError?.(err)
  }
}
