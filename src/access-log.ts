import type pino from 'pino'
import type { AccessLine } from './proxy/server.js'

/**
 * What is recorded of every answered request: the access log (SPEC §6: one
 * pino line per request, unless ACCESS_LOG=false) and the request metrics,
 * both at the end of the event loop's turn in which the request was
 * answered, together with the other requests of that turn.
 *
 * Why not at once: under load a turn answers many requests, and each request
 * runs through Fastify, reply-from, undici and Node's HTTP code, which push
 * pino's code and data out of the CPU's caches. A line written in the middle
 * of that cost several times what the same line costs written beside the
 * others: 4–5 µs against about 1 µs (measured in the running proxy and in a
 * loop), and the access line was the largest part of what the sidecar costs
 * beyond bare @fastify/http-proxy (docs/performance.md). Written together,
 * the lines of a turn find pino's code where the previous one left it. The
metrics are recorded in the same pass for the same reason; a scrape, which
arrives in a later turn, counts every request answered before it.
 *
 * The line is the same; its `time` is when it is written, in the same turn as
 * the answer (under a millisecond later). Lines not yet written when the
 * process ends are written by `flush()`, which the shutdown calls.
 */
export class AccessLog {
  readonly #log: pino.Logger | undefined
  readonly #record: (line: AccessLine) => void
  #pending: AccessLine[] = []
  readonly #writePending = (): void => { this.flush() }

  /** `log`: where the lines go, undefined for none; `record`: what else is done with each (the metrics). */
  constructor (log: pino.Logger | undefined, record: (line: AccessLine) => void) {
    this.#log = log
    this.#record = record
  }

  add (line: AccessLine): void {
    if (this.#pending.push(line) === 1) setImmediate(this.#writePending)
  }

  /** Writes and records the requests not yet written (a turn's end, or the shutdown). */
  flush (): void {
    const lines = this.#pending
    if (lines.length === 0) return
    this.#pending = []
    const log = this.#log
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i]!
      log?.info(line, 'request')
      this.#record(line)
    }
  }
}
