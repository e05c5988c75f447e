import * as oauth from 'oauth4webapi'
import type { PrimaryGrant } from '../config/load.js'

/**
 * What the token endpoint answered, and what the sidecar makes of it:
 * failures sorted by how they are retried, the token set checked field by
 * field. Sending is oauth-client.ts's; deciding when is lifecycle.ts's.
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

/** The request of an attempt that failed: discovery, or a grant. */
export type Step = GrantType | 'discovery'

export class GrantError extends Error {
  readonly kind: FailureKind
  /** the OAuth `error` code, when the server sent one */
  readonly oauthError: string | undefined
  /** the server's error_description, shortened */
  readonly description: string | undefined
  readonly status: number | undefined
  readonly retryAfterMs: number | undefined
  /** the request that failed, once a token source has said */
  readonly step: Step | undefined

  constructor (message: string, kind: FailureKind, details: { oauthError?: string, description?: string, status?: number, retryAfterMs?: number, cause?: unknown, step?: Step } = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause })
    this.name = 'GrantError'
    this.kind = kind
    this.oauthError = details.oauthError
    this.description = details.description
    this.status = details.status
    this.retryAfterMs = details.retryAfterMs
    this.step = details.step
  }

  /** A failure as a GrantError of the request `step` (anything else thrown is a transient failure). */
  static at (step: Step, err: unknown): GrantError {
    const e = err instanceof GrantError ? err : new GrantError(String(err), 'transient', { cause: err })
    if (e.step !== undefined) return e
    return new GrantError(e.message, e.kind, {
      ...(e.oauthError !== undefined && { oauthError: e.oauthError }),
      ...(e.description !== undefined && { description: e.description }),
      ...(e.status !== undefined && { status: e.status }),
      ...(e.retryAfterMs !== undefined && { retryAfterMs: e.retryAfterMs }),
      ...(e.cause !== undefined && { cause: e.cause }),
      step
    })
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
 * A token endpoint's answer, checked. oauth4webapi processes it first
 * (`process`: the fields of RFC 6749 §5.1, and an error answer as its
 * ResponseBodyError, whose `error` sorts the refusal); then what the
 * sidecar needs on top: a lifetime of at least a second, a token that
 * fits in a header, Keycloak's `refresh_expires_in`. An ID token in the
 * answer is the application's to judge, not the sidecar's (it uses the
 * access token only): oauth4webapi does not see it, since it would check
 * its issuer against the URL dialled, which is not the issuer wherever the
 * auth server is reached by an internal address. Every failure is a
 * GrantError, an unusable answer described in the sidecar's words.
 */
export async function checkTokenAnswer (res: Response, process: (res: Response) => Promise<oauth.TokenEndpointResponse>, shorten: Shorten): Promise<TokenSet> {
  const answer = await answerOf(res)
  if (answer.status === 200 && isHtml(answer)) throw new GrantError('token endpoint answered 200 with an HTML page, not a token: this URL is not the token endpoint', 'wrong_url', { status: 200 })
  let fields: Record<string, unknown>
  try {
    fields = await process(withoutIdToken(res, answer.body)) as unknown as Record<string, unknown>
  } catch (err) {
    if (err instanceof oauth.ResponseBodyError) throw errorFromAnswer(answer, shorten, { error: err.error, description: err.error_description ?? '' })
    if (err instanceof oauth.WWWAuthenticateChallengeError) {
      const { error, error_description: description } = err.cause[0]?.parameters ?? {}
      throw errorFromAnswer(answer, shorten, { ...(error !== undefined && { error }), description: description ?? '' })
    }
    // oauth4webapi reads an OAuth error from a 4xx only; a 5xx may carry one too (temporarily_unavailable)
    if (answer.status !== 200) throw errorFromAnswer(answer, shorten, oauthErrorOf(answer.body))
    throw unusable(problemOf(answer.body) ?? translated(err, answer.body, shorten), err)
  }
  const problem = problemOf(fields)
  if (problem !== undefined) throw unusable(problem)
  const expiresIn = seconds(fields.expires_in)!
  const refreshExpiresIn = seconds(fields.refresh_expires_in) ?? 0
  // token_type as the server spelt it (oauth4webapi lower-cases it), for what the sidecar says
  const tokenType = String((JSON.parse(answer.body) as { token_type?: unknown }).token_type)
  const set: TokenSet = { accessToken: fields.access_token as string, tokenType, expiresInMs: Math.min(expiresIn * 1000, MAX_LIFETIME_MS) }
  if (typeof fields.refresh_token === 'string' && fields.refresh_token !== '') {
    set.refreshToken = fields.refresh_token
    if (refreshExpiresIn > 0) set.refreshExpiresInMs = Math.min(refreshExpiresIn * 1000, MAX_LIFETIME_MS)
  }
  if (typeof fields.issued_token_type === 'string') set.issuedTokenType = fields.issued_token_type
  return set
}

function unusable (problem: string, cause?: unknown): GrantError {
  return new GrantError(problem.startsWith('token endpoint') ? problem : `token response: ${problem}`, 'unusable', { status: 200, ...(cause !== undefined && { cause }) })
}

/**
 * What makes a 200 answer's fields (parsed, or its body as it came)
 * unusable for the sidecar, in its words; undefined when nothing does.
 */
function problemOf (fields: Record<string, unknown> | string): string | undefined {
  if (typeof fields === 'string') {
    let parsed: unknown
    try {
      parsed = JSON.parse(fields)
    } catch {
      return 'token endpoint answered 200 with a body that is not JSON'
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return 'token endpoint answered 200 with JSON that is not an object'
    fields = parsed as Record<string, unknown>
  }
  const accessToken = fields.access_token
  if (typeof accessToken !== 'string' || accessToken === '') return 'access_token is missing or not a string'
  if (accessToken.length > MAX_ACCESS_TOKEN_BYTES) return `access_token is ${accessToken.length} bytes, more than the ${MAX_ACCESS_TOKEN_BYTES} an upstream takes in a header`
  if (!B64TOKEN.test(accessToken)) return 'access_token contains characters not allowed in a bearer token'
  const expiresIn = seconds(fields.expires_in)
  if (expiresIn === undefined) return 'expires_in is missing or not a number'
  if (expiresIn < 1) return 'expires_in must be at least 1 second'
  const refreshExpiresIn = fields.refresh_expires_in === undefined || fields.refresh_expires_in === null ? 0 : seconds(fields.refresh_expires_in)
  if (refreshExpiresIn === undefined || refreshExpiresIn < 0) return 'refresh_expires_in must be a number of seconds, 0 or more'
  return undefined
}

/** oauth4webapi's reason, for what the sidecar's own checks pass (a token_type it does not know, say). */
function translated (err: unknown, body: string, shorten: Shorten): string {
  if (err instanceof oauth.UnsupportedOperationError) {
    const type = (JSON.parse(body) as { token_type?: unknown }).token_type
    return `token_type ${JSON.stringify(shorten(String(type), 40))} is neither Bearer nor DPoP`
  }
  const property = /"response" body "(\w+)" property must be an? (\w+)/.exec((err as Error).message)
  if (property !== null) return `${property[1]!} is missing or not a ${property[2]!}`
  return shorten((err as Error).message.replace(/"response" body /g, ''), MAX_DESCRIPTION)
}

/** The answer without its ID token (see checkTokenAnswer). */
function withoutIdToken (res: Response, body: string): Response {
  let fields: unknown
  try { fields = JSON.parse(body) } catch { return res }
  if (typeof fields !== 'object' || fields === null || !('id_token' in fields)) return res
  const { id_token: _idToken, ...rest } = fields as Record<string, unknown>
  return new Response(JSON.stringify(rest), { status: res.status, headers: res.headers })
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

/** Keycloak's hint for a refusal's description, when it is one of its configuration errors. */
export function keycloakHint (description: string): string | undefined {
  return HINTS.find(([pattern]) => pattern.test(description))?.[1]
}

/**
 * The GrantError of an answer other than 200: sorted by status and its OAuth
 * error (oauth4webapi's reading of it), with Keycloak's hints.
 */
export function errorFromAnswer (answer: Answer, shorten: Shorten, refusal: { error?: string, description: string }): GrantError {
  const retryAfterMs = parseRetryAfter(answer.retryAfter)
  const said = refusal.description
  const oauthError = refusal.error === undefined ? undefined : shorten(refusal.error, 100)
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
  const hint = keycloakHint(said) ?? ''
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
