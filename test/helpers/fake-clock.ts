import type { Clock } from '../../src/token/clock.js'

interface Timer { id: number, at: number, fn: () => void }

/** A clock whose time moves only when the test says so. */
export class FakeClock implements Clock {
  #now = 1_000_000
  #next = 1
  readonly #timers = new Map<number, Timer>()

  now (): number { return this.#now }

  setTimeout (fn: () => void, ms: number): unknown {
    const id = this.#next++
    this.#timers.set(id, { id, at: this.#now + Math.max(0, ms), fn })
    return id
  }

  clearTimeout (handle: unknown): void {
    this.#timers.delete(handle as number)
  }

  /** Pending timers' due times, soonest first. */
  get pending (): number[] {
    return [...this.#timers.values()].map((t) => t.at - this.#now).sort((a, b) => a - b)
  }

  /** Moves time forward by `ms`, running each timer at its due time and letting promises settle. */
  async advance (ms: number): Promise<void> {
    const target = this.#now + ms
    await settle()
    for (;;) {
      const due = [...this.#timers.values()].filter((t) => t.at <= target).sort((a, b) => a.at - b.at || a.id - b.id)[0]
      if (due === undefined) break
      this.#timers.delete(due.id)
      this.#now = Math.max(this.#now, due.at)
      due.fn()
      await settle()
    }
    this.#now = target
    await settle()
  }
}

/** Lets pending promise callbacks and immediates run. */
export async function settle (): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve))
}
