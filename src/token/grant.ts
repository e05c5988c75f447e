import type { PrimaryGrant } from '../config/load.js'

/**
 * The token endpoint's protocol: building a grant request and checking its
 * answer, kept apart from sending it (see auth-server.ts) and from deciding
 * when to send it (see manager.ts).
 */

export type GrantType = PrimaryGrant | 'refresh_token'

export interface TokenSet {
  accessToken: string
  /** token_type as the server named it (Bearer, DPoP), '' when it named none */
  tokenType: string
  expiresInMs: number
  refreshToken?: string
  /** undefined: the refresh token does not lapse on its own (`refresh_expires_in: 0` or absent) */
  refreshExpiresInMs?: number
}

export interface TokenEndpointResponse {
  status: number
  /** the Retry-After header, if any */
  retryAfter?: string
  /** the Content-Type header, if any */
  contentType?: string
  /** the Location header of a redirect, if any */
  location?: string
  /** the DPoP-Nonce header, if any */
  dpopNonce?: string
  body: string
}

/**
 * Sends a form to the token endpoint (or the end-session or revocation
 * endpoint), with `headers` (Authorization, DPoP) besides the content type;
 * rejects on network errors and on `signal`.
 */
export type PostForm = (url: string, form: string, signal: AbortSignal, headers?: Record<string, string>) => Promise<TokenEndpointResponse>

/** GETs a JSON document (OpenID Connect discovery); rejects on network errors and on `signal`. */
export type GetJson = (url: string, signal: AbortSignal) => Promise<TokenEndpointResponse>

/**
 * How a failed grant is handled:
 * - `rejected`: the server refused these credentials or this client (a 4xx); retrying soon cannot help;
 * - `transient`: network error, timeout, 5xx, 429; retried with backoff;
 * - `unusable`: a 200 without a token we can use; retried slowly, since each may have opened a session;
 * - `wrong_url`: what answered is not a token endpoint (404, a redirect, an HTML page); retried slowly;
 * - `credential`: the sidecar's own client credential cannot be used (a key that does not parse, an
 *   assertion that has expired); nothing is sent; retried when its file changes, else slowly.
 */
export type FailureKind = 'rejected' | 'transient' | 'unusable' | 'wrong_url' | 'credential'

const REJECTED_ERRORS = new Set(['invalid_grant', 'invalid_client', 'unauthorized_client'])

export class GrantError extends Error {
  readonly kind: FailureKind
  /** the OAuth `error` code, when the server sent one */
  readonly oauthError: string | undefined
  readonly status: number | undefined
  readonly retryAfterMs: number | undefined

  constructor (message: string, kind: FailureKind, details: { oauthError?: string, status?: number, retryAfterMs?: number, cause?: unknown } = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause })
    this.name = 'GrantError'
    this.kind = kind
    this.oauthError = details.oauthError
    this.status = details.status
    this.retryAfterMs = details.retryAfterMs
  }
}

/** What every grant carries besides its own fields: AUTH_SCOPE and AUTH_TOKEN_PARAMS. */
export interface GrantExtras {
  scope?: string
  /** AUTH_TOKEN_PARAMS: sent after the sidecar's own fields */
  params?: ReadonlyArray<readonly [string, string]>
}

/** One request to the auth server: its form, and client_secret_basic's Authorization header. */
export interface GrantRequest {
  form: string
  authorization?: string
}

export type Fields = Array<[string, string]>

export function passwordGrant (username: string, password: string): Fields {
  return [['grant_type', 'password'], ['username', username], ['password', password]]
}

export function clientCredentialsGrant (): Fields {
  return [['grant_type', 'client_credentials']]
}

export function refreshGrant (refreshToken: string): Fields {
  return [['grant_type', 'refresh_token'], ['refresh_token', refreshToken]]
}

/** Keycloak's end-session endpoint, called by the client with the session's refresh token. */
export function endSessionFields (refreshToken: string): Fields {
  return [['refresh_token', refreshToken]]
}

/** RFC 7009 revocation of one token. */
export function revocationFields (token: string, hint: 'refresh_token' | 'access_token'): Fields {
  return [['token', token], ['token_type_hint', hint]]
}

/**
 * A request's form: the client's part (its id and credential, or nothing
 * but an Authorization header), the request's own fields, and for grants the
 * scope and AUTH_TOKEN_PARAMS.
 */
export function buildRequest (client: { fields: Fields, authorization?: string }, fields: Fields, extras?: GrantExtras): GrantRequest {
  const form = new URLSearchParams([...fields, ...client.fields])
  if (extras?.scope !== undefined) form.set('scope', extras.scope)
  for (const [name, value] of extras?.params ?? []) form.append(name, value)
  return { form: form.toString(), ...(client.authorization !== undefined && { authorization: client.authorization }) }
}

/**
 * Lifetimes are capped at a year: `expires_in: 1e306` is a
 * number, but times a thousand it is Infinity, and Infinity minus Infinity in
 * the schedule was NaN, a timer of 0 ms and a grant loop. A token that claims
 * to live longer is renewed after half a year, late but never at once.
 */
export const MAX_LIFETIME_MS = 365 * 86_400_000

// RFC 6750 b64token: what may follow "Bearer " in a header, nothing else.
const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/
/** Longest error_description quoted in a log line. */
const MAX_DESCRIPTION = 200

/** Checks one token endpoint answer: a TokenSet, or a GrantError saying exactly what is wrong. */
export function checkTokenResponse (res: TokenEndpointResponse): TokenSet {
  if (res.status !== 200) throw errorFromResponse(res)
  if (isHtml(res)) throw new GrantError('token endpoint answered 200 with an HTML page, not a token: this URL is not the token endpoint', 'wrong_url', { status: 200 })

  let body: unknown
  try {
    body = JSON.parse(res.body)
  } catch (cause) {
    throw new GrantError('token endpoint answered 200 with a body that is not JSON', 'unusable', { status: 200, cause })
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new GrantError('token endpoint answered 200 with JSON that is not an object', 'unusable', { status: 200 })
  }
  const fields = body as Record<string, unknown>
  const invalid = (message: string): GrantError => new GrantError(`token response: ${message}`, 'unusable', { status: 200 })

  const accessToken = fields.access_token
  if (typeof accessToken !== 'string' || accessToken === '') throw invalid('access_token is missing or not a string')
  if (!B64TOKEN.test(accessToken)) throw invalid('access_token contains characters not allowed in a bearer token')

  const expiresIn = seconds(fields.expires_in)
  if (expiresIn === undefined) throw invalid('expires_in is missing or not a number')
  if (expiresIn < 1) throw invalid('expires_in must be at least 1 second')

  const set: TokenSet = { accessToken, tokenType: typeof fields.token_type === 'string' ? fields.token_type : '', expiresInMs: Math.min(expiresIn * 1000, MAX_LIFETIME_MS) }

  const refreshToken = fields.refresh_token
  if (refreshToken !== undefined && refreshToken !== null) {
    if (typeof refreshToken !== 'string' || refreshToken === '') throw invalid('refresh_token is not a non-empty string')
    set.refreshToken = refreshToken
    if (fields.refresh_expires_in !== undefined && fields.refresh_expires_in !== null) {
      const refreshExpiresIn = seconds(fields.refresh_expires_in)
      if (refreshExpiresIn === undefined || refreshExpiresIn < 0) {
        throw invalid('refresh_expires_in must be a number of seconds, 0 or more')
      }
      if (refreshExpiresIn > 0) set.refreshExpiresInMs = Math.min(refreshExpiresIn * 1000, MAX_LIFETIME_MS)
    }
  }
  return set
}

/** A lifetime in seconds: a number, or a numeric string as some servers send ("3599"). */
function seconds (value: unknown): number | undefined {
  const n = typeof value === 'number' ? value : typeof value === 'string' && /^\s*\d+(\.\d+)?\s*$/.test(value) ? Number(value) : NaN
  return Number.isFinite(n) ? n : undefined
}

function errorFromResponse (res: TokenEndpointResponse): GrantError {
  const retryAfterMs = parseRetryAfter(res.retryAfter)
  const { error: oauthError, description } = oauthErrorOf(res)

  const what = oauthError === undefined
    ? `token endpoint answered ${res.status}`
    : `token endpoint answered ${res.status} ${oauthError}${description ? ` (${description})` : ''}`

  // A 404 (Keycloak: an unknown path, or "Realm does not exist"), a redirect
  // or an HTML page: the URL is not a token endpoint, whatever the body says.
  if (res.status === 404 || (oauthError === undefined && res.status < 500 && ((res.status >= 300 && res.status < 400) || isHtml(res)))) {
    const detail = res.status >= 300 && res.status < 400
      ? ` (a redirect${res.location === undefined ? '' : ` to ${res.location.slice(0, 200)}`})`
      : isHtml(res) ? ' with an HTML page' : ''
    return new GrantError(`${what}${detail}: this URL is not the token endpoint`, 'wrong_url', { status: res.status })
  }

  // use_dpop_nonce here means the nonce changed again since the one retry
  // with it: the next attempt's proof carries the newer one.
  if (res.status >= 500 || res.status === 429 || res.status === 408 || res.status < 400 || oauthError === 'use_dpop_nonce') {
    return new GrantError(what, 'transient', { status: res.status, ...(oauthError !== undefined && { oauthError }), ...(retryAfterMs !== undefined && { retryAfterMs }) })
  }
  // Any other 4xx (invalid_grant, invalid_client, an unknown realm...) will
  // not fix itself: it is retried slowly, never in a tight loop.
  const hint = /not fully set up/i.test(description)
    ? ': the service account has pending required actions in Keycloak (a configuration error)'
    : /public client not allowed to retrieve service account/i.test(description)
      ? ': the client is public; client_credentials needs a confidential client (Client authentication on) and AUTH_CLIENT_SECRET'
      : /not enabled to retrieve service account/i.test(description)
        ? ': turn on "Service accounts roles" for this client in Keycloak (a configuration error)'
        : /not allowed for direct access grants/i.test(description)
          ? ': turn on "Direct access grants" for this client in Keycloak (a configuration error)'
          : /DPoP proof is missing/i.test(description)
            ? ': the client requires DPoP-bound tokens; set AUTH_DPOP=true'
            : ''
  return new GrantError(what + hint, 'rejected', { status: res.status, ...(oauthError !== undefined && { oauthError }) })
}

/**
 * The OAuth error of an answer (RFC 6749 §5.2), from the token, end-session
 * or revocation endpoint: its `error` code, and its description cut to
 * MAX_DESCRIPTION ('' when none). Nothing when the body is not JSON (an HTML
 * error page from a gateway, say).
 */
export function oauthErrorOf (res: TokenEndpointResponse): { error?: string, description: string } {
  try {
    const body = JSON.parse(res.body) as { error?: unknown, error_description?: unknown }
    return {
      ...(typeof body.error === 'string' && { error: body.error }),
      description: typeof body.error_description === 'string' ? body.error_description.slice(0, MAX_DESCRIPTION) : ''
    }
  } catch {
    return { description: '' }
  }
}

function isHtml (res: TokenEndpointResponse): boolean {
  return /text\/html/i.test(res.contentType ?? '') || /^\s*</.test(res.body.slice(0, 64))
}

/** Whether an error code means the credentials or the client were refused. */
export function isCredentialRejection (err: GrantError): boolean {
  return err.kind === 'rejected' && err.oauthError !== undefined && REJECTED_ERRORS.has(err.oauthError)
}

function parseRetryAfter (value: string | undefined): number | undefined {
  if (value === undefined) return undefined
  const seconds = Number(value)
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000
  const date = Date.parse(value)
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now())
}
