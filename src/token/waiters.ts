import type { EventEmitter } from 'node:events'
import { TokenUnavailableError } from '../errors.js'
import type { Clock } from './clock.js'
import type { CredentialEvents } from './credential.js'

interface Waiter<T> {
  resolve: (value: T) => void
  reject: (err: Error) => void
  deadline: number
  timer: unknown
}

/**
 * Requests waiting for a token being obtained, each for TOKEN_WAIT_MS at
 * most: they get the token when it comes, or TokenUnavailableError with
 * the Retry-After their owner names.
 */
export class Waiters<T> {
  readonly #clock: Clock
  readonly #waitMs: number
  readonly #retryAfterSeconds: () => number
  readonly #waiting = new Set<Waiter<T>>()

  constructor (clock: Clock, waitMs: number, retryAfterSeconds: () => number) {
    this.#clock = clock
    this.#waitMs = waitMs
    this.#retryAfterSeconds = retryAfterSeconds
  }

  /** One more waiter, given up after TOKEN_WAIT_MS. */
  wait (): Promise<T> {
    return new Promise((resolve, reject) => {
      const waiter: Waiter<T> = {
        resolve,
        reject,
        deadline: this.#clock.now() + this.#waitMs,
        timer: this.#clock.setTimeout(() => {
          this.#waiting.delete(waiter)
          reject(new TokenUnavailableError(this.#retryAfterSeconds()))
        }, this.#waitMs)
      }
      this.#waiting.add(waiter)
    })
  }

  /** Every waiter gets `value`. */
  resolve (value: T): void {
    for (const w of this.#waiting) {
      this.#clock.clearTimeout(w.timer)
      w.resolve(value)
    }
    this.#waiting.clear()
  }

  /** The waiters whose deadline comes before `time` (all without one) give up now. */
  failBefore (time = Infinity): void {
    for (const w of this.#waiting) {
      if (w.deadline >= time) continue
      this.#clock.clearTimeout(w.timer)
      this.#waiting.delete(w)
      w.reject(new TokenUnavailableError(this.#retryAfterSeconds()))
    }
  }
}

/** What `read` gives once the credential holds its next token, or undefined when none comes within `waitMs`. */
export function nextToken<T> (events: EventEmitter<CredentialEvents>, clock: Clock, waitMs: number, read: () => T): Promise<T | undefined> {
  return new Promise<T | undefined>((resolve) => {
    const timer = clock.setTimeout(() => {
      events.off('token', got)
      resolve(undefined)
    }, waitMs)
    const got = (): void => {
      clock.clearTimeout(timer)
      resolve(read())
    }
    events.once('token', got)
  })
}
