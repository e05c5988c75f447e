import type { PrimaryGrant } from '../config/load.js'

/**
 * What the token endpoint answered, and what the sidecar makes of it:
 * failures sorted by how they are retried, the token set checked field by
 * field. Sending is oauth-client.ts's; deciding when is manager.ts's.
 */

export type GrantType = PrimaryGrant | 'refresh_token' | 'token_exchange'

/** RFC 8693's grant type, and its type of token, as they go in a form. */
export const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange'
export const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token'
/** The token types an exchange may issue for the sidecar to send as its access token: an access token, or a JWT usable as one. */
export const USABLE_ISSUED_TYPES: ReadonlySet<string> = new Set([ACCESS_TOKEN_TYPE, 'urn:ietf:params:oauth:token-type:jwt'])

export interface TokenSet {
  accessToken: string
  /** token_type as the server named it (Bearer, DPoP) */
  tokenType: string
  expiresInMs: number
  refreshToken?: string
  /** undefined: the refresh token does not lapse on its own (`refresh_expires_in: 0` or absent) */
  refreshExpiresInMs?: number
  /** the thumbprint of the client certificate the grant was made with: a bound token works only with it */
  certificate?: string
  /** a token exchange's `issued_token_type` (RFC 8693 §2.2.1), as the server named it */
  issuedTokenType?: string
}

/**
 * How a failed grant is handled:
 * - `rejected`: the server refused these credentials or this client (a 4xx); retrying soon cannot help;
 * - `transient`: network error, timeout, 5xx, 429; retried with backoff;
 * - `unusable`: a 200 without a token we can use; retried with backoff that grows to the slow pace,
 *   since each may have opened a session;
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
  /** the server's error_description, shortened */
  readonly description: string | undefined
  readonly status: number | undefined
  readonly retryAfterMs: number | undefined

  constructor (message: string, kind: FailureKind, details: { oauthError?: string, description?: string, status?: number, retryAfterMs?: number, cause?: unknown } = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause })
    this.name = 'GrantError'
    this.kind = kind
    this.oauthError = details.oauthError
    this.description = details.description
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

export type Fields = Array<[string, string]>

/** A grant's form fields: its own, then the scope and AUTH_TOKEN_PARAMS; the client's part is added when it is sent. */
export function grantFields (grant: string, own: Fields, extras: GrantExtras): Fields {
  const fields: Fields = [['grant_type', grant], ...own]
  if (extras.scope !== undefined) fields.push(['scope', extras.scope])
  for (const [name, value] of extras.params ?? []) fields.push([name, value])
  return fields
}

/** An answer as the sidecar reads it: its status, the headers it acts on, its body. */
export interface Answer {
  status: number
  retryAfter?: string
  contentType?: string
  location?: string
  dpopNonce?: string
  body: string
}

/** Reads a Response without consuming it (oauth4webapi may read it after). */
export async function answerOf (res: Response): Promise<Answer> {
  const header = (name: string): Record<string, string> => {
    const value = res.headers.get(name)
    return value === null ? {} : { [name.replace(/-(\w)/g, (_, c: string) => c.toUpperCase())]: value }
  }
  return {
    status: res.status,
    ...header('retry-after'),
    ...header('content-type'),
    ...header('location'),
    ...header('dpop-nonce'),
    body: await res.clone().text()
  }
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
/**
 * The largest access token taken: an Authorization header beyond it is
 * refused by the servers behind most upstreams (Node's 16 KiB of headers,
 * nginx's and Tomcat's 8 KiB a line), so every request would fail.
 */
export const MAX_ACCESS_TOKEN_BYTES = 16 * 1024
/** Longest error_description quoted in a log line, after the known secrets are replaced. */
export const MAX_DESCRIPTION = 200

/** Makes a server's text fit to show: the known secrets replaced first, then cut to `max` characters. */
export type Shorten = (text: string, max: number) => string

/**
 * Checks a token endpoint answer: first what the sidecar needs (a token
 * that fits in a header, a lifetime) and what is Keycloak's
 * (`refresh_expires_in`), then oauth4webapi's own processing (`validate`:
 * the fields of RFC 6749 §5.1, an ID token's claims); every failure sorted
 * into a GrantError.
 */
export async function checkTokenAnswer (answer: Answer, validate: () => Promise<unknown>, shorten: Shorten): Promise<TokenSet> {
  if (answer.status !== 200) throw errorFromAnswer(answer, shorten)
  if (isHtml(answer)) throw new GrantError('token endpoint answered 200 with an HTML page, not a token: this URL is not the token endpoint', 'wrong_url', { status: 200 })
  let body: unknown
  try {
    body = JSON.parse(answer.body)
  } catch (cause) {
    throw new GrantError('token endpoint answered 200 with a body that is not JSON', 'unusable', { status: 200, cause })
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new GrantError('token endpoint answered 200 with JSON that is not an object', 'unusable', { status: 200 })
  }
  const fields = body as Record<string, unknown>
  const invalid = (message: string, cause?: unknown): GrantError => new GrantError(`token response: ${message}`, 'unusable', { status: 200, ...(cause !== undefined && { cause }) })

  const accessToken = fields.access_token
  if (typeof accessToken !== 'string' || accessToken === '') throw invalid('access_token is missing or not a string')
  if (accessToken.length > MAX_ACCESS_TOKEN_BYTES) throw invalid(`access_token is ${accessToken.length} bytes, more than the ${MAX_ACCESS_TOKEN_BYTES} an upstream takes in a header`)
  if (!B64TOKEN.test(accessToken)) throw invalid('access_token contains characters not allowed in a bearer token')
  const expiresIn = seconds(fields.expires_in)
  if (expiresIn === undefined) throw invalid('expires_in is missing or not a number')
  if (expiresIn < 1) throw invalid('expires_in must be at least 1 second')
  const refreshToken = fields.refresh_token
  const refreshExpiresIn = fields.refresh_expires_in === undefined || fields.refresh_expires_in === null ? 0 : seconds(fields.refresh_expires_in)
  if (refreshExpiresIn === undefined || refreshExpiresIn < 0) throw invalid('refresh_expires_in must be a number of seconds, 0 or more')
  try {
    await validate()
  } catch (err) {
    throw invalid(shorten((err as Error).message.replace(/"response" body /g, ''), MAX_DESCRIPTION), err)
  }

  const set: TokenSet = { accessToken, tokenType: String(fields.token_type), expiresInMs: Math.min(expiresIn * 1000, MAX_LIFETIME_MS) }
  if (typeof fields.issued_token_type === 'string') set.issuedTokenType = fields.issued_token_type
  if (typeof refreshToken === 'string' && refreshToken !== '') {
    set.refreshToken = refreshToken
    if (refreshExpiresIn > 0) set.refreshExpiresInMs = Math.min(refreshExpiresIn * 1000, MAX_LIFETIME_MS)
  }
  return set
}

/** A lifetime in seconds: a number, or a numeric string as some servers send ("3599"). */
function seconds (value: unknown): number | undefined {
  const n = typeof value === 'number' ? value : typeof value === 'string' && /^\s*\d+(\.\d+)?\s*$/.test(value) ? Number(value) : NaN
  return Number.isFinite(n) ? n : undefined
}

/** Hints for Keycloak's descriptions of refusals that are configuration errors. */
const HINTS: Array<[RegExp, string]> = [
  [/not fully set up/i, ': the service account has pending required actions in Keycloak (a configuration error)'],
  [/public client not allowed to retrieve service account/i, ': the client is public; client_credentials needs a confidential client (Client authentication on) and AUTH_CLIENT_SECRET'],
  [/not enabled to retrieve service account/i, ': turn on "Service accounts roles" for this client in Keycloak (a configuration error)'],
  [/not allowed for direct access grants/i, ': turn on "Direct access grants" for this client in Keycloak (a configuration error)'],
  [/DPoP proof is missing/i, ': the client requires DPoP-bound tokens; set AUTH_DPOP=true']
]

/** The GrantError of an answer other than 200: sorted by status and OAuth error, with Keycloak's hints. */
export function errorFromAnswer (answer: Answer, shorten: Shorten): GrantError {
  const retryAfterMs = parseRetryAfter(answer.retryAfter)
  const { error: code, description: said } = oauthErrorOf(answer.body)
  const oauthError = code === undefined ? undefined : shorten(code, 100)
  const description = shorten(said, MAX_DESCRIPTION)
  const what = oauthError === undefined
    ? `token endpoint answered ${answer.status}`
    : `token endpoint answered ${answer.status} ${oauthError}${description ? ` (${description})` : ''}`

  // A 404 (Keycloak: an unknown path, or "Realm does not exist"), a redirect
  // or an HTML page: the URL is not a token endpoint, whatever the body says.
  if (answer.status === 404 || (oauthError === undefined && answer.status < 500 && ((answer.status >= 300 && answer.status < 400) || isHtml(answer)))) {
    const detail = answer.status >= 300 && answer.status < 400
      ? ` (a redirect${answer.location === undefined ? '' : ` to ${shorten(answer.location, 200)}`})`
      : isHtml(answer) ? ' with an HTML page' : ''
    return new GrantError(`${what}${detail}: this URL is not the token endpoint`, 'wrong_url', { status: answer.status })
  }

  // use_dpop_nonce here means the nonce changed again since the one retry
  // with it: the next attempt's proof carries the newer one.
  if (answer.status >= 500 || answer.status === 429 || answer.status === 408 || answer.status < 400 || oauthError === 'use_dpop_nonce') {
    return new GrantError(what, 'transient', { status: answer.status, ...(oauthError !== undefined && { oauthError }), ...(retryAfterMs !== undefined && { retryAfterMs }) })
  }
  // Any other 4xx (invalid_grant, invalid_client, an unknown realm...) will
  // not fix itself: it is retried slowly, never in a tight loop.
  const hint = HINTS.find(([pattern]) => pattern.test(said))?.[1] ?? ''
  return new GrantError(what + hint, 'rejected', { status: answer.status, description, ...(oauthError !== undefined && { oauthError }) })
}

/**
 * Whether an exchange was refused its subject token (expired, revoked, its
 * session ended): RFC 8693 says invalid_grant; Keycloak says
 * invalid_request "Invalid token".
 */
export function refusesSubject (err: GrantError): boolean {
  return err.kind === 'rejected' && (err.oauthError === 'invalid_grant' || (err.oauthError === 'invalid_request' && /^invalid token$/i.test(err.description ?? '')))
}

/**
 * The OAuth error of an answer's body (RFC 6749 §5.2), from the token,
 * end-session or revocation endpoint: its `error` code and its description
 * ('' when none), whole: whoever shows them replaces the known secrets first
 * and cuts after (secrets.ts). Nothing when the body is not JSON (an HTML
 * error page from a gateway, say).
 */
export function oauthErrorOf (body: string): { error?: string, description: string } {
  try {
    const parsed = JSON.parse(body) as { error?: unknown, error_description?: unknown }
    return {
      ...(typeof parsed.error === 'string' && { error: parsed.error }),
      description: typeof parsed.error_description === 'string' ? parsed.error_description : ''
    }
  } catch {
    return { description: '' }
  }
}

function isHtml (answer: Answer): boolean {
  return /text\/html/i.test(answer.contentType ?? '') || /^\s*</.test(answer.body.slice(0, 64))
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
