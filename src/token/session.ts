import type { AuthServer } from './auth-server.js'
import { endSessionFields, oauthErrorOf, revocationFields, type Fields } from './grant.js'
import type { LogoutResult } from './source.js'

/** What is held when the session is ended: the refresh token if any, else the access token. */
export interface HeldSession {
  refreshToken: string | undefined
  accessToken: string | undefined
}

/**
 * Ends the auth server session that the sidecar's grants opened, best
 * effort, within `timeoutMs`: Keycloak's end-session endpoint with the
 * refresh token (discovered, or derived from the token URL), else RFC 7009
 * revocation where discovery offers it. Every password grant opens a
 * Keycloak user session that would otherwise outlive the process until SSO
 * Session Idle, so a restarting fleet would pile them up.
 */
export async function endSession (server: AuthServer, held: HeldSession, timeoutMs: number): Promise<LogoutResult> {
  const { refreshToken, accessToken } = held
  if (refreshToken === undefined && accessToken === undefined) return { outcome: 'skipped', detail: 'no session to end: no token was obtained' }
  const endSessionUrl = server.endpoints?.endSessionUrl ?? (server.issuerUrl === undefined ? keycloakLogoutUrl(server.tokenUrl) : undefined)
  const revocationUrl = server.endpoints?.revocationUrl
  let url: string
  let fields: Fields
  let endpoint: string
  if (refreshToken !== undefined && endSessionUrl !== undefined) {
    url = endSessionUrl
    fields = endSessionFields(refreshToken)
    endpoint = 'end-session endpoint'
  } else if (revocationUrl !== undefined) {
    url = revocationUrl
    fields = revocationFields(refreshToken ?? accessToken!, refreshToken !== undefined ? 'refresh_token' : 'access_token')
    endpoint = 'revocation endpoint'
  } else if (refreshToken === undefined) {
    return { outcome: 'skipped', detail: 'no session to end: no refresh token was issued and the server offers no revocation endpoint' }
  } else {
    return { outcome: 'skipped', detail: 'session left open: no end-session endpoint is known (the token URL does not end in /token; set AUTH_ISSUER_URL)' }
  }
  try {
    const res = await server.postForm(url, fields, timeoutMs)
    if (res.status >= 200 && res.status < 300) return { outcome: 'success', detail: `session ended: the ${endpoint} ${url} answered ${res.status}` }
    const answer = oauthErrorOf(res)
    const error = answer.error?.slice(0, 100)
    const description = answer.description
    const what = `the ${endpoint} ${url} answered ${res.status}${error === undefined ? '' : ` ${error}${description === '' ? '' : ` (${description})`}`}`
    return res.status >= 400 && res.status < 500 && error !== undefined
      ? { outcome: 'rejected', detail: `session not ended: ${what}` }
      : { outcome: 'error', detail: `session not ended: ${what}${res.status === 404 || res.status === 405 ? ' (no such endpoint on this server: set AUTH_LOGOUT_ON_SHUTDOWN=false, or AUTH_ISSUER_URL)' : ''}` }
  } catch (err) {
    return { outcome: 'error', detail: `session not ended: ${(err as Error).message}` }
  }
}

/** Keycloak's end-session endpoint: the token URL with its last segment `token` replaced by `logout`. */
export function keycloakLogoutUrl (tokenUrl: string | undefined): string | undefined {
  if (tokenUrl === undefined) return undefined
  const url = new URL(tokenUrl)
  if (!url.pathname.endsWith('/token')) return undefined
  url.pathname = `${url.pathname.slice(0, -'token'.length)}logout`
  return url.href
}
