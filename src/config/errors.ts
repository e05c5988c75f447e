/**
 * The configuration's errors, with their stable codes as the sidecar's other
 * errors have them (errors.ts lists them all). None carries a value read: a
 * message names the variable or the file.
 */

/** Every problem with the configuration, reported together. */
export class ConfigError extends Error {
  readonly code = 'AUTH_SIDECAR_CONFIG'
  readonly problems: readonly string[]
  constructor (problems: string[]) {
    super(`invalid configuration: ${problems.join('; ')}`)
    this.name = 'ConfigError'
    this.problems = problems
  }
}

/** A credential file that cannot be used; the message names why, never the content. */
export class SecretFileError extends Error {
  readonly code = 'AUTH_SIDECAR_SECRET_FILE'
  /** `not_a_file`, `too_large`, or the system's code (`ENOENT`, `EACCES`, ...) */
  readonly reason: string
  constructor (reason: string, message: string) {
    super(message)
    this.name = 'SecretFileError'
    this.reason = reason
  }
}

/** A TLS file that cannot be used, its variable named in the message (never its content). */
export class TlsFileError extends Error {
  readonly code = 'AUTH_SIDECAR_TLS_FILE'
  constructor (message: string) {
    super(message)
    this.name = 'TlsFileError'
  }
}
