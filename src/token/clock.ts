/** Time as the token manager sees it; tests inject a fake one. */
export interface Clock {
  now(): number
  setTimeout(fn: () => void, ms: number): unknown
  clearTimeout(handle: unknown): void
}

/** setTimeout fires at once for delays above 2^31-1 ms; longer waits are re-armed. */
export const MAX_TIMER_MS = 2_147_483_647

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => {
    const t = setTimeout(fn, Math.min(Math.max(ms, 0), MAX_TIMER_MS))
    t.unref()
    return t
  },
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout)
}
