/** Gives a place back; calling it again does nothing. */
export type Release = () => void

interface Waiting {
  resolve: (release: Release) => void
  reject: (reason: unknown) => void
  signal: AbortSignal
  onAbort: () => void
}

/**
 * At most `size` exchanges with the upstream at once (UPSTREAM_CONNECTIONS):
 * the others wait here, in order of arrival, rather than in undici's pool,
 * so that a request whose client has gone or whose time is up leaves the
 * queue without being sent and without a connection opened for it.
 */
export class UpstreamSlots {
  #free: number
  readonly #queue = new Set<Waiting>()

  constructor (size: number) {
    this.#free = size
  }

  /** A place, once one is free; rejects with the signal's reason should it abort first. */
  acquire (signal: AbortSignal): Promise<Release> {
    if (signal.aborted) return Promise.reject(signal.reason)
    if (this.#free > 0) {
      this.#free--
      return Promise.resolve(this.#release())
    }
    return new Promise((resolve, reject) => {
      const waiting: Waiting = {
        resolve,
        reject,
        signal,
        onAbort: () => {
          this.#queue.delete(waiting)
          reject(signal.reason)
        }
      }
      signal.addEventListener('abort', waiting.onAbort, { once: true })
      this.#queue.add(waiting)
    })
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
      const waiting = next.value
      this.#queue.delete(waiting)
      waiting.signal.removeEventListener('abort', waiting.onAbort)
      waiting.resolve(this.#release())
    }
  }
}
