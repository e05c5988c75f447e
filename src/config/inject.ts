import { resolve } from 'node:path'
import { ConfigError } from './errors.js'
import type { LogLevel } from './types.js'

/**
 * The settings of the `inject` command (the admission webhook). They are
 * not the sidecar's: the webhook runs in a pod of its own, so its variables
 * are read here and nowhere near the sidecar's schema.
 */

export const DEFAULT_INJECT_HOST = '0.0.0.0'
export const DEFAULT_INJECT_PORT = 8443
export const DEFAULT_INJECT_LOG_LEVEL: LogLevel = 'info'
/**
 * How long /mutate is still served after SIGTERM while /readyz answers 503:
 * the API server keeps calling a pod until the endpoints it knows are
 * updated, and with failurePolicy Fail a review that finds no server fails
 * the pod's creation.
 */
export const DEFAULT_INJECT_SHUTDOWN_DELAY_MS = 5_000
export const MAX_INJECT_SHUTDOWN_DELAY_MS = 60_000

export interface InjectConfig {
  host: string
  port: number
  /** the serving certificate and key (PEM), read again when they change */
  certFile: string
  keyFile: string
  /** the sidecar image put into the pods */
  image: string
  /** how long reviews are still served after SIGTERM before the server closes; 0 for not at all */
  shutdownDelayMs: number
  logLevel: LogLevel
}

/** The variables, with their line of documentation, for `inject --help` and the docs. */
export const INJECT_VARIABLES: ReadonlyArray<{ name: string, description: string, default?: string }> = [
  { name: 'INJECT_HOST', description: 'the address the webhook listens on (the API server calls it from outside the pod)', default: DEFAULT_INJECT_HOST },
  { name: 'INJECT_PORT', description: 'the webhook\'s HTTPS port', default: String(DEFAULT_INJECT_PORT) },
  { name: 'INJECT_TLS_CERT_FILE', description: 'its serving certificate (PEM), read again when the file changes' },
  { name: 'INJECT_TLS_KEY_FILE', description: 'the certificate\'s private key (PEM, unencrypted)' },
  { name: 'INJECT_IMAGE', description: 'the auth-sidecar image injected into the pods' },
  { name: 'INJECT_SHUTDOWN_DELAY_MS', description: `after SIGTERM, how long /mutate is still served while /readyz answers 503 (0 to ${MAX_INJECT_SHUTDOWN_DELAY_MS}; 0: none; a second signal ends it)`, default: String(DEFAULT_INJECT_SHUTDOWN_DELAY_MS) },
  { name: 'LOG_LEVEL', description: 'pino log level', default: DEFAULT_INJECT_LOG_LEVEL }
]

const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']
/** An image reference as a container's `image` takes it: no spaces, no control characters. */
const IMAGE = /^[a-z0-9][\w.\-/:@]*$/i

/** Reads the webhook's settings; throws one ConfigError naming every variable that is wrong. */
export function readInjectConfig (env: NodeJS.ProcessEnv, cwd = process.cwd()): InjectConfig {
  const problems: string[] = []
  const value = (name: string): string | undefined => {
    const v = env[name]?.trim()
    return v === undefined || v === '' ? undefined : v
  }
  const required = (name: string, what: string): string => {
    const v = value(name)
    if (v === undefined) problems.push(`${name} is required: ${what}`)
    return v ?? ''
  }

  /** A whole number from 0 to `max`, or `fallback` when unset. */
  const wholeNumber = (name: string, fallback: number, max: number, problem: string): number => {
    const text = value(name)
    if (text === undefined) return fallback
    if (!/^\d+$/.test(text) || Number(text) > max) problems.push(problem)
    return Number(text)
  }

  const port = wholeNumber('INJECT_PORT', DEFAULT_INJECT_PORT, 65535, 'INJECT_PORT must be a port number (0 to 65535)')
  const certFile = required('INJECT_TLS_CERT_FILE', 'the webhook\'s serving certificate (PEM); the API server calls it over HTTPS only')
  const keyFile = required('INJECT_TLS_KEY_FILE', 'the serving certificate\'s private key (PEM)')
  const image = required('INJECT_IMAGE', 'the auth-sidecar image to inject')
  if (image !== '' && !IMAGE.test(image)) problems.push('INJECT_IMAGE must be an image reference (registry/name:tag or @digest)')
  const shutdownDelayMs = wholeNumber('INJECT_SHUTDOWN_DELAY_MS', DEFAULT_INJECT_SHUTDOWN_DELAY_MS, MAX_INJECT_SHUTDOWN_DELAY_MS, `INJECT_SHUTDOWN_DELAY_MS must be a whole number of milliseconds from 0 to ${MAX_INJECT_SHUTDOWN_DELAY_MS}`)
  const logLevel = (value('LOG_LEVEL') ?? DEFAULT_INJECT_LOG_LEVEL) as LogLevel
  if (!LOG_LEVELS.includes(logLevel)) problems.push(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}`)

  if (problems.length > 0) throw new ConfigError(problems)
  return { host: value('INJECT_HOST') ?? DEFAULT_INJECT_HOST, port, certFile: resolve(cwd, certFile), keyFile: resolve(cwd, keyFile), image, shutdownDelayMs, logLevel }
}
