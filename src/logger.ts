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
 * syscall was a tenth of the proxy's CPU. The writes are synchronous, pino's
 * default: handing each 4 KiB to libuv's thread pool (`sync: false`) cost
 * more than the write itself, 7.8% of the proxy's busy time in the profile
 * against 0.2% (docs/performance.md). Should stdout's reader stall, the
 * proxy waits for it rather than holding an unbounded backlog of lines.
 * pino flushes what is left on exit.
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

function stdout (): pino.DestinationStream {
  const stream = pino.destination({ sync: true, minLength: LOG_BUFFER_BYTES, periodicFlush: LOG_FLUSH_MS })
  // pino flushes on exit only the destinations it writes asynchronously;
  // this one buffers too, and its last lines are often the ones that matter
  process.once('exit', () => { try { stream.flushSync() } catch {} })
  return stream
}
