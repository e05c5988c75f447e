/** Gives a place back; calling it again does nothing. */
export type Release = () => void

/**
 * At most `size` exchanges with the upstream at once (UPSTREAM_CONNECTIONS):
 * the others wait here, in order of arrival, rather than in undici's pool,
 * so that a request whose client has gone or whose time is up leaves the
 * queue without being sent and without a connection opened for it.
 *
 * A place given back goes to the next in the queue on the event loop's next
 * turn, not at once, and never to a request whose client's connection is
 * gone: clients that leave together (a load balancer's timeout) are read in
 * one turn, each connection closed as it is read but its departure told a
 * turn later, so a place freed by the first would otherwise go to requests
 * whose clients left with it.
 */
export class UpstreamSlots {
  #free: number
  readonly #queue = new Map<(release: Release) => void, () => boolean>()
  #handing: NodeJS.Immediate | undefined

  constructor (size: number) {
    this.#free = size
  }

  /** A place now, or undefined when none is free (or others wait for one). */
  take (): Release | undefined {
    if (this.#free === 0 || this.#queue.size > 0) return undefined
    this.#free--
    return this.#release()
  }

  /**
   * Waits for a place, in order, unless `gone` says the client has left by
   * then (its departure then takes it out); returns what leaves the queue
   * before a place is given.
   */
  wait (granted: (release: Release) => void, gone: () => boolean): () => void {
    this.#queue.set(granted, gone)
    return () => { this.#queue.delete(granted) }
  }

  #release (): Release {
    let released = false
    return () => {
      if (released) return
      released = true
      this.#free++
      if (this.#queue.size > 0) this.#handing ??= setImmediate(this.#handOut)
    }
  }

  readonly #handOut = (): void => {
    this.#handing = undefined
    for (const [next, gone] of this.#queue) {
      if (this.#free === 0) return
      this.#queue.delete(next)
      if (gone()) continue
      this.#free--
      next(this.#release())
    }
  }
}
