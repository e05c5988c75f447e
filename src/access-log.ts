import type pino from 'pino'
import type { AccessLine } from './proxy/server.js'

/**
 * What is recorded of every answered request: the access log (SPEC §6: one
 * pino line per request, unless ACCESS_LOG=false) and the request metrics,
 * both at the end of the event loop's turn in which the request was
 * answered, together with the other requests of that turn.
 *
 * Why not at once: under load a turn answers many requests (10–12 under 32
 * connections), and between two of them each request runs through Fastify,
 * reply-from, undici and Node's HTTP code. A line written in the middle of
 * that cost 4–5 µs in the running proxy against about 1 µs in a loop of
 * lines (the likely cause: pino's code and data pushed out of the CPU's
 * caches), and the access line was the largest part of what the sidecar
 * costs beyond bare @fastify/http-proxy (docs/performance.md). Written
 * together, a turn's lines find pino where the previous line left it. The
 * metrics are recorded in the same pass for the same reason; a scrape,
 * which arrives in a later turn, counts every request answered before it.
 *
 * The line is the same; its `time` is when it is written, later than the
 * answer by at most the rest of that turn (some ten requests' work under
 * load: 1–2 ms here). The shutdown calls `flush()` once the proxy is closed;
 * a process that exits without one (the shutdown's own deadline passed)
 * loses the lines of its last turn; one that is killed loses those and what
 * the stdout batch (src/logger.ts) had not written yet.
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
