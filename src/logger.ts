import pino from 'pino'
import type { LogLevel } from './config/load.js'

/** The part of pino the sidecar's components use, so tests can pass their own. */
export interface Logger {
  debug(obj: object, msg?: string): void
  info(obj: object, msg?: string): void
  warn(obj: object, msg?: string): void
  error(obj: object, msg?: string): void
}

/**
 * Every place a secret could sit in a log object. The code never logs these
 * objects on purpose; redaction is the second line of defence. Paths are
 * exact and case-sensitive (Node lower-cases incoming header names).
 */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers["proxy-authorization"]',
  'req.headers.cookie',
  'res.headers["set-cookie"]',
  'headers.authorization',
  'headers["proxy-authorization"]',
  'err.headers.authorization',
  'err.config.headers.authorization',
  'err.request.headers.authorization',
  'err.cause.headers.authorization',
  'access_token',
  'refresh_token',
  'password',
  'client_secret',
  '*.access_token',
  '*.refresh_token',
  '*.password',
  '*.client_secret',
  '*.clientSecret',
  '*.accessToken',
  '*.refreshToken',
  'credentials',
  '*.credentials',
  'config.credentials'
]

/**
 * Log lines are gathered up to 4 KiB and written at least every 100 ms, not
 * one write(2) each: at thousands of requests per second the per-line
 * syscall was a tenth of the proxy's CPU.
 */
const LOG_BUFFER_BYTES = 4096
const LOG_FLUSH_MS = 100

export function createLogger (level: LogLevel, destination?: pino.DestinationStream): pino.Logger {
  return pino({
    level,
    base: { name: 'auth-sidecar' },
    // pino's default: "time" in epoch milliseconds (an ISO string per line
    // cost 3% of the proxy's CPU in the profile)
    redact: { paths: REDACT_PATHS, censor: '[redacted]' }
  }, destination ?? stdout())
}

/** Where a LineBatch writes: sonic-boom, which handles partial writes, EAGAIN and a closed pipe. */
export interface LineSink {
  write(data: string): boolean
}

/**
 * pino's destination for stdout: lines gathered in an array and written in
 * one piece once they reach `bytes` (counted as characters: pino's lines
 * are ASCII but for logged values), or after `flushMs`.
 *
 * Why not sonic-boom's own batching (`minLength`): it appends each line to a
 * string and measures that string's UTF-8 length on every line, which was
 * 1.8% of the proxy's busy time in the profile. Why synchronous writes:
 * handing each batch to libuv's thread pool (`sync: false`) cost more than
 * the write itself, 7.8% of busy time against 0.2% (docs/performance.md).
 * Should stdout's reader stall, the proxy waits for it rather than holding
 * an unbounded backlog, as with pino's default destination.
 */
export class LineBatch {
  #lines: string[] = []
  #chars = 0
  readonly #sink: LineSink
  readonly #limit: number

  constructor (sink: LineSink, { bytes = LOG_BUFFER_BYTES, flushMs = LOG_FLUSH_MS } = {}) {
    this.#sink = sink
    this.#limit = bytes
    setInterval(() => this.flush(), flushMs).unref()
  }

  write (line: string): boolean {
    this.#lines.push(line)
    this.#chars += line.length
    if (this.#chars >= this.#limit) this.flush()
    return true
  }

  /** Writes what is gathered, if anything (pino's `logger.flush()` calls it). */
  flush (done?: (err?: Error) => void): void {
    if (this.#chars > 0) {
      const data = this.#lines.join('')
      this.#lines = []
      this.#chars = 0
      this.#sink.write(data)
    }
    done?.()
  }
}

function stdout (): LineBatch {
  const batch = new LineBatch(pino.destination({ sync: true }))
  // a process that exits between two batches keeps its last lines, often
  // the ones that matter
  process.once('exit', () => batch.flush())
  return batch
}
