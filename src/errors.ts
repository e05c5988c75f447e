/**
 * The sidecar's errors, in one place.
 *
 * `ERRORS` are what it answers a client with: a code each, with its HTTP
 * status. Bodies are `{"error": code, "message": text}` and never carry
 * internal detail.
 *
 * The classes below are what it throws and logs: each has a stable `code`,
 * `AUTH_SIDECAR_*`, the field a log line or a span names it by, except
 * where the sidecar's error stands for one of undici's (the upstream's
 * timeout), which carries undici's so that both are classed alike. None
 * carries a secret: messages name variables and files, never values. A
 * grant's failure is token/grant.ts's GrantError: it carries the auth
 * server's OAuth error and how the failure is retried instead.
 */
export const ERRORS = {
  token_unavailable: { status: 503, message: 'no valid access token is available; retry later' },
  upstream_unreachable: { status: 502, message: 'the upstream could not be reached or closed the connection' },
  upstream_timeout: { status: 504, message: 'the upstream did not answer in time' },
  bad_request: { status: 400, message: 'the request target is not allowed' },
  malformed_request: { status: 400, message: 'the request could not be parsed' },
  method_not_allowed: { status: 405, message: 'this method is not forwarded' },
  headers_too_large: { status: 431, message: 'the request headers are too large' },
  request_timeout: { status: 408, message: 'the request headers did not arrive in time' },
  overloaded: { status: 503, message: 'too many requests in progress; retry later' },
  destination_not_allowed: { status: 403, message: 'this destination is not reachable through the proxy' },
  misdirected_request: { status: 421, message: 'the request names another host than the connection was opened for' },
  certificate_unavailable: { status: 503, message: 'the proxy cannot present a certificate for this host now; retry later' },
  internal_error: { status: 500, message: 'the sidecar failed to handle the request' }
} as const

export type ErrorCode = keyof typeof ERRORS

export function errorBody (code: ErrorCode): string {
  return JSON.stringify({ error: code, message: ERRORS[code].message })
}

/** An error of the sidecar's own, with its stable code. */
export abstract class SidecarError extends Error {
  abstract readonly code: string
  constructor (message: string, options?: ErrorOptions) {
    super(message, options)
    this.name = new.target.name
  }
}

// the configuration's errors are config/'s own, since config/ depends on no other folder
export { ConfigError, SecretFileError, TlsFileError } from './config/errors.js'

/** A listener could not be opened: names the variable and the address. */
export class ListenError extends SidecarError {
  readonly code = 'AUTH_SIDECAR_LISTEN'
  /** the system's code (`EADDRINUSE`, `EACCES`, ...) */
  readonly reason: string | undefined
  constructor (variable: string, host: string, port: number, cause: NodeJS.ErrnoException) {
    const why = cause.code === 'EADDRINUSE'
      ? 'is already in use'
      : cause.code === 'EACCES'
        ? 'may not be opened by this user (a port below 1024?)'
        : cause.code === 'EADDRNOTAVAIL' || cause.code === 'ENOTFOUND'
          ? 'is not an address of this host'
          : `cannot be opened (${cause.code ?? cause.message})`
    super(`${variable}: ${host.includes(':') ? `[${host}]` : host}:${port} ${why}; set ${variable} to a free port`, { cause })
    this.reason = cause.code
  }
}

/** No valid token now; `retryAfterSeconds` tells the client when to try again (answered `token_unavailable`). */
export class TokenUnavailableError extends SidecarError {
  readonly code = 'AUTH_SIDECAR_TOKEN_UNAVAILABLE'
  readonly retryAfterSeconds: number
  constructor (retryAfterSeconds: number) {
    super(ERRORS.token_unavailable.message)
    this.retryAfterSeconds = retryAfterSeconds
  }
}

/** The client's connection closed: nothing more is sent for it. */
export class ClientGoneError extends SidecarError {
  readonly code = 'AUTH_SIDECAR_CLIENT_GONE'
  constructor () {
    super('the client closed the connection')
  }
}

/** The upstream gave no final answer within UPSTREAM_TIMEOUT_MS: undici's code for the same. */
export class UpstreamTimeoutError extends SidecarError {
  readonly code = 'UND_ERR_HEADERS_TIMEOUT'
  constructor () {
    super('the upstream did not answer in time')
  }
}

/** The upstream sent more interim (1xx) answers than the proxy takes. */
export class InterimFloodError extends SidecarError {
  readonly code = 'AUTH_SIDECAR_INTERIM_FLOOD'
  constructor (most: number) {
    super(`the upstream sent more than ${most} interim (1xx) answers`)
  }
}

/** The upstream answered with a status outside 100-599. */
export class InvalidStatusError extends SidecarError {
  readonly code = 'AUTH_SIDECAR_INVALID_STATUS'
  constructor (status: number) {
    super(`the upstream answered with status ${status}`)
  }
}

/** A try the proxy ends itself: a 401 it sends again, or an answer it will not relay. */
export class NotRelayedError extends SidecarError {
  readonly code = 'AUTH_SIDECAR_NOT_RELAYED'
  constructor () {
    super('the answer is not relayed')
  }
}

/** The route's client certificate cannot be presented (expired, not yet valid, replaced): nothing is sent. */
export class CertificateUnusableError extends SidecarError {
  readonly code = 'AUTH_SIDECAR_CERTIFICATE_UNUSABLE'
}

/** The egress proxy refused the tunnel to the upstream. */
export class TunnelRefusedError extends SidecarError {
  readonly code = 'AUTH_SIDECAR_TUNNEL_REFUSED'
  constructor (status: number) {
    super(`the egress proxy refused the tunnel (${status})`)
  }
}

/** A forward-proxy destination resolves to an address it may not reach by its name. */
export class ForbiddenAddressError extends SidecarError {
  readonly code = 'AUTH_SIDECAR_FORBIDDEN_ADDRESS'
  constructor () {
    super('the destination\'s name resolves to an address reached only through an IP pattern')
  }
}
