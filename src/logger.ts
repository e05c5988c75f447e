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
  'req.headers.dpop',
  'res.headers["set-cookie"]',
  'headers.authorization',
  'headers["proxy-authorization"]',
  'headers.dpop',
  'err.headers.authorization',
  'err.config.headers.authorization',
  'err.request.headers.authorization',
  'err.cause.headers.authorization',
  'err.request.headers.dpop',
  'err.cause.headers.dpop',
  'access_token',
  'refresh_token',
  'password',
  'client_secret',
  'client_assertion',
  '*.access_token',
  '*.refresh_token',
  '*.password',
  '*.client_secret',
  '*.client_assertion',
  '*.clientSecret',
  '*.accessToken',
  '*.refreshToken',
  'credentials',
  '*.credentials',
  // a configuration holds its credentials' literal values in each route's credential
  'config.routes[*].credential.sources'
]

/** Log lines are gathered up to this many bytes before one write... */
export const LOG_BATCH_BYTES = 4096
/** ...and what is gathered is written at least this often. */
export const LOG_FLUSH_MS = 100

/**
 * JSON lines on stdout, gathered up to LOG_BATCH_BYTES and written at most
 * LOG_FLUSH_MS late (sonic-boom's minLength and periodicFlush): a system call
 * per access line cost more than the rest of the line. Writes stay
 * synchronous, so should stdout's reader stall, the sidecar waits for it
 * rather than buffering without bound; what is gathered is written when the
 * process exits, and only a SIGKILL loses it.
 */
function stdoutDestination (): pino.DestinationStream {
  const destination = pino.destination({ dest: 1, sync: true, minLength: LOG_BATCH_BYTES, periodicFlush: LOG_FLUSH_MS })
  process.once('exit', () => {
    try { destination.flushSync() } catch {} // stdout already closed: nowhere left to write
  })
  return destination
}

export function createLogger (level: LogLevel, destination: pino.DestinationStream = stdoutDestination()): pino.Logger {
  return pino({
    level,
    base: { name: 'auth-sidecar' },
    redact: { paths: REDACT_PATHS, censor: '[redacted]' }
  }, destination)
}
