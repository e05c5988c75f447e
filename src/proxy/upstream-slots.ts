/** Gives a place back; calling it again does nothing. */
export type Release = () => void

/**
 * At most `size` exchanges with the upstream at once (UPSTREAM_CONNECTIONS):
 * the others wait here, in order of arrival, rather than in undici's pool,
 * so that a request whose client has gone or whose time is up leaves the
 * queue without being sent and without a connection opened for it.
 */
export class UpstreamSlots {
  #free: number
  readonly #queue = new Set<(release: Release) => void>()

  constructor (size: number) {
    this.#free = size
  }

  /** A place now, or undefined when none is free. */
  take (): Release | undefined {
    if (this.#free === 0) return undefined
    this.#free--
    return this.#release()
  }

  /** Waits for a place, in order; returns what leaves the queue before one is given. */
  wait (granted: (release: Release) => void): () => void {
    this.#queue.add(granted)
    return () => { this.#queue.delete(granted) }
  }

  #release (): Release {
    let released = false
    return () => {
      if (released) return
      released = true
      const next = this.#queue.values().next()
      if (next.done === true) {
        this.#free++
        return
      }
      this.#queue.delete(next.value)
      next.value(this.#release())
    }
  }
}
