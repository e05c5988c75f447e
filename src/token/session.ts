import type { Clock } from './clock.js'
import type { LogoutOutcome, LogoutResult } from './credential.js'
import { MAX_DESCRIPTION, oauthErrorOf, type Answer, type Shorten } from './grant.js'
import type { OAuthClient } from './oauth-client.js'

/** What is held when the session is ended: the refresh token if any, else the access token. */
export interface HeldSession {
  refreshToken: string | undefined
  accessToken: string | undefined
}

/** One request that may end the session. */
interface Attempt {
  url: string
  endpoint: 'end-session endpoint' | 'revocation endpoint'
  /** revocation: the kind of token revoked */
  hint?: 'refresh_token' | 'access_token'
  send: (timeoutMs: number) => Promise<Answer>
}

/**
 * Ends the auth server session that the sidecar's grants opened, best
 * effort, within `timeoutMs`: Keycloak's end-session endpoint with the
 * refresh token (discovered, or derived from the token URL), else RFC 7009
 * revocation where discovery offers it. Every password grant opens a
 * Keycloak user session that would otherwise outlive the process until SSO
 * Session Idle, so a restarting fleet would pile them up.
 *
 * An end-session endpoint that refuses is followed by revocation of the
 * refresh token, when a revocation endpoint is known: Keycloak's end-session
 * endpoint refuses a DPoP-bound refresh token (a public client's) whatever
 * proof comes with it, and its revocation endpoint ends the same session.
 */
export async function endSession (server: OAuthClient, held: HeldSession, timeoutMs: number, clock: Pick<Clock, 'now'>, shorten: Shorten): Promise<LogoutResult> {
  const { refreshToken, accessToken } = held
  if (refreshToken === undefined && accessToken === undefined) return { outcome: 'skipped', detail: 'no session to end: no token was obtained' }
  // without discovery, Keycloak's layout: the token URL's siblings
  const derived = server.issuerUrl === undefined
  const endSessionUrl = server.endpoints?.endSessionUrl ?? (derived ? keycloakEndpointUrl(server.tokenUrl, 'logout') : undefined)
  const attempts: Attempt[] = []
  if (refreshToken !== undefined && endSessionUrl !== undefined) {
    attempts.push({ url: endSessionUrl, endpoint: 'end-session endpoint', send: async (ms) => await server.endSession(endSessionUrl, refreshToken, ms) })
  }
  // A derived revocation URL only follows a refusal: alone, it would be a
  // guess sent to every server whose token URL ends in /token.
  const revocationUrl = server.endpoints?.revocationUrl ?? (derived && attempts.length > 0 ? keycloakEndpointUrl(server.tokenUrl, 'revoke') : undefined)
  if (revocationUrl !== undefined) {
    const [token, hint] = refreshToken !== undefined ? [refreshToken, 'refresh_token' as const] : [accessToken!, 'access_token' as const]
    attempts.push({ url: revocationUrl, endpoint: 'revocation endpoint', hint, send: async (ms) => await server.revoke(revocationUrl, token, hint, ms) })
  }
  if (attempts.length === 0) {
    return refreshToken === undefined
      ? { outcome: 'skipped', detail: 'no session to end: no refresh token was issued and the server offers no revocation endpoint' }
      : derived
        ? { outcome: 'skipped', detail: 'session left open: no end-session endpoint is known (the token URL does not end in /token; set AUTH_ISSUER_URL)' }
        : { outcome: 'skipped', detail: 'session left open: discovery named no end-session or revocation endpoint on the issuer\'s or the token endpoint\'s origin' }
  }

  const deadline = clock.now() + timeoutMs
  const refusals: string[] = []
  let outcome: LogoutOutcome = 'error'
  for (const { url, endpoint, send, hint } of attempts) {
    const left = refusals.length === 0 ? timeoutMs : Math.round(deadline - clock.now())
    if (left <= 0) {
      refusals.push(`no time left for the ${endpoint} ${url}`)
      break
    }
    let status: number
    let answer: ReturnType<typeof oauthErrorOf>
    try {
      const res = await send(left)
      status = res.status
      answer = oauthErrorOf(res.body)
    } catch (err) {
      // unreachable or timed out: another request to the same server would fare no better
      return { outcome: 'error', detail: `session not ended: ${[...refusals, (err as Error).message].join('; ')}` }
    }
    const what = `the ${endpoint} ${url} answered ${status}`
    if (status >= 200 && status < 300) {
      return { outcome: 'success', detail: `session ended: ${what}${refusals.length === 0 ? '' : `, after ${refusals.join('; ')}`}` }
    }
    // RFC 7009 §2.2.1: the server does not revoke this kind of token (a
    // self-contained JWT, say): there is no session the sidecar could end
    if (endpoint === 'revocation endpoint' && status === 400 && answer.error === 'unsupported_token_type' && refusals.length === 0) {
      return { outcome: 'skipped', detail: `nothing to end: ${what} unsupported_token_type (it does not revoke ${hint === 'refresh_token' ? 'refresh' : 'access'} tokens)` }
    }
    const error = answer.error === undefined ? undefined : shorten(answer.error, 100)
    const description = shorten(answer.description, MAX_DESCRIPTION)
    const rejected = status >= 400 && status < 500 && error !== undefined
    outcome = rejected ? 'rejected' : 'error'
    refusals.push(`${what}${error === undefined ? '' : ` ${error}${description === '' ? '' : ` (${description})`}`}${!rejected && (status === 404 || status === 405) ? ' (no such endpoint on this server: set AUTH_LOGOUT_ON_SHUTDOWN=false, or AUTH_ISSUER_URL)' : ''}`)
  }
  return { outcome, detail: `session not ended: ${refusals.join('; ')}` }
}

/** One of Keycloak's OpenID Connect endpoints: the token URL with its last segment `token` replaced by `name`. */
export function keycloakEndpointUrl (tokenUrl: string | undefined, name: 'logout' | 'revoke'): string | undefined {
  if (tokenUrl === undefined) return undefined
  const url = new URL(tokenUrl)
  if (!url.pathname.endsWith('/token')) return undefined
  url.pathname = `${url.pathname.slice(0, -'token'.length)}${name}`
  return url.href
}
