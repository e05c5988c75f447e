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
  'config.credentials'
]

/**
 * JSON lines on stdout, written synchronously: a line is never lost when the
 * process ends, and should stdout's reader stall, the sidecar waits for it
 * rather than buffering without bound.
 */
export function createLogger (level: LogLevel, destination: pino.DestinationStream = pino.destination({ dest: 1, sync: true })): pino.Logger {
  return pino({
    level,
    base: { name: 'auth-sidecar' },
    redact: { paths: REDACT_PATHS, censor: '[redacted]' }
  }, destination)
}
