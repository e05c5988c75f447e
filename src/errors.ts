/**
 * The errors the sidecar itself answers with: one registry of codes, each
 * with its HTTP status. Bodies are `{"error": code, "message": text}` and
 * never carry internal detail.
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

/** No valid token now; `retryAfterSeconds` tells the client when to try again. */
export class TokenUnavailableError extends Error {
  readonly code = 'token_unavailable'
  readonly retryAfterSeconds: number
  constructor (retryAfterSeconds: number) {
    super(ERRORS.token_unavailable.message)
    this.name = 'TokenUnavailableError'
    this.retryAfterSeconds = retryAfterSeconds
  }
}
