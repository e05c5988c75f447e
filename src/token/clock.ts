/** Time as the token manager sees it; tests inject a fake one. */
export interface Clock {
  /** milliseconds on a monotonic clock: only differences mean anything */
  now(): number
  setTimeout(fn: () => void, ms: number): unknown
  clearTimeout(handle: unknown): void
}

/** setTimeout fires at once for delays above 2^31-1 ms; longer waits are re-armed. */
export const MAX_TIMER_MS = 2_147_483_647

/**
 * Lifetimes are counted on the monotonic clock: should the wall clock be
 * stepped back, an expired token would otherwise count as valid for the
 * length of the step.
 */
export const systemClock: Clock = {
  now: () => performance.now(),
  setTimeout: (fn, ms) => {
    const t = setTimeout(fn, Math.min(Math.max(ms, 0), MAX_TIMER_MS))
    t.unref()
    return t
  },
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout)
}

/** One call pending on a clock at a time, however far off: setTimeout's limit is crossed by re-arming. */
export class Alarm {
  readonly #clock: Clock
  #handle: unknown

  constructor (clock: Clock) {
    this.#clock = clock
  }

  /** Runs `fn` at `dueAt`, instead of what was set before. */
  set (dueAt: number, fn: () => void): void {
    this.#clock.clearTimeout(this.#handle)
    const wait = (): void => {
      const left = dueAt - this.#clock.now()
      if (left > MAX_TIMER_MS) {
        this.#handle = this.#clock.setTimeout(wait, MAX_TIMER_MS)
      } else {
        this.#handle = this.#clock.setTimeout(fn, Math.max(0, left))
      }
    }
    wait()
  }

  clear (): void {
    this.#clock.clearTimeout(this.#handle)
  }
}
