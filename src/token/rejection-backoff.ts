/** 401-caused renewals in a row wait 0, then 1 s, doubling up to 60 s. */
export const UPSTREAM_401_BACKOFF_MIN_MS = 1_000
export const UPSTREAM_401_BACKOFF_MAX_MS = 60_000

/**
 * When the upstream rejects a token, a new one is obtained at once; should
 * it reject the new ones too (a wrong audience, say), renewals caused by its
 * 401s back off, whatever it answers to other requests in between, so that
 * such an upstream cannot drive a grant per request. A token obtained on
 * schedule starts over.
 */
export class RejectionBackoff {
  #inARow = 0
  #nextAt = 0
  #told = false

  /**
   * A 401 at `now`: 0 when a renewal may start (and it is counted), else how
   * long to wait; `first` is true once per wait, for a single log line.
   */
  take (now: number): { waitMs: number, inARow: number, first: boolean } {
    if (now < this.#nextAt) {
      const first = !this.#told
      this.#told = true
      return { waitMs: this.#nextAt - now, inARow: this.#inARow, first }
    }
    this.#inARow += 1
    this.#nextAt = now + Math.min(UPSTREAM_401_BACKOFF_MAX_MS, UPSTREAM_401_BACKOFF_MIN_MS * 2 ** Math.min(this.#inARow - 1, 30))
    this.#told = false
    return { waitMs: 0, inARow: this.#inARow, first: false }
  }

  reset (): void {
    this.#inARow = 0
    this.#nextAt = 0
  }
}
