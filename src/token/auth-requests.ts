import { refusesCertificate } from '../tls/certificate.js'
import type { Clock } from './clock.js'
import { GrantError } from './grant.js'

export type RequestPurpose = 'token' | 'discovery' | 'logout'

/** The client certificate of the auth server's connections (AUTH_TLS_*), as a request needs to know it. */
export interface AuthTls {
  /** why the client certificate cannot be presented now, if it cannot */
  unusable(): string | undefined
  /** whether one is presented */
  readonly presents: boolean
  /** the server's refusal of it just now */
  refusal(): string | undefined
}

/**
 * The requests one OAuthClient sends to the auth server, each aborted
 * after its timeout; a network error or timeout becomes a transient
 * GrantError that names the request's purpose, and a refused client
 * certificate is named as such. Token and discovery requests are also
 * aborted by stop(); the session's end, which runs after it, is not.
 */
export class AuthRequests {
  readonly #clock: Clock
  readonly #tls: AuthTls | undefined
  /** the grant or discovery request in flight, aborted by stop() */
  #abort: AbortController | undefined
  #stopped = false

  constructor (clock: Clock, tls: AuthTls | undefined) {
    this.#clock = clock
    this.#tls = tls
  }

  get stopped (): boolean {
    return this.#stopped
  }

  /** Aborts the request in flight; nothing more is sent but the session ending. */
  stop (): void {
    this.#stopped = true
    this.#abort?.abort()
  }

  /** One request, `send` given the signal that aborts it after `timeoutMs`. */
  async send<T> (purpose: RequestPurpose, timeoutMs: number, send: (signal: AbortSignal) => Promise<T>): Promise<T> {
    if (this.#stopped && purpose !== 'logout') throw new GrantError(`${purpose} request not sent: shutting down`, 'transient')
    // an expired certificate is never shown: the request waits for the renewed file
    const unusable = this.#tls?.unusable()
    if (unusable !== undefined) throw new GrantError(unusable, 'credential')
    const abort = new AbortController()
    const tracked = purpose !== 'logout'
    if (tracked) this.#abort = abort
    const timer = this.#clock.setTimeout(() => abort.abort(), timeoutMs)
    try {
      return await send(abort.signal)
    } catch (err) {
      const refusal = this.#tls?.refusal()
      const code = refusal ?? describeNetworkError(err)
      const message = abort.signal.aborted
        ? `${purpose} request timed out after ${timeoutMs} ms`
        : refusesCertificate(code)
          ? `${purpose} request failed: ${code}: the auth server refused the client certificate${this.#tls?.presents === true ? ' (AUTH_TLS_CERT_FILE: is its CA trusted there, and is it the client\'s?)' : '; it requires one: set AUTH_TLS_CERT_FILE and AUTH_TLS_KEY_FILE'}`
          : `${purpose} request failed: ${code}`
      throw new GrantError(message, 'transient', { cause: err })
    } finally {
      this.#clock.clearTimeout(timer)
      if (tracked && this.#abort === abort) this.#abort = undefined
    }
  }
}

function describeNetworkError (err: unknown): string {
  const e = err as { code?: string, message?: string, cause?: { code?: string } }
  return e.code ?? e.cause?.code ?? e.message ?? 'unknown error'
}
