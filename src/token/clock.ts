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
