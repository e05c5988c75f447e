import { GrantError, type TokenEndpointResponse } from './grant.js'

/**
 * OpenID Connect discovery (AUTH_ISSUER_URL): the realm's endpoints read
 * from `{issuer}/.well-known/openid-configuration`, checked the way OpenID
 * Connect Discovery §4.3 says: the document must name the issuer it was
 * fetched from, or it is not used.
 */
export interface Endpoints {
  /** undefined when AUTH_TOKEN_URL wins and the document has none */
  tokenUrl?: string
  endSessionUrl?: string
  revocationUrl?: string
}

export function wellKnownUrl (issuer: string): string {
  return `${issuer.replace(/\/+$/, '')}/.well-known/openid-configuration`
}

/**
 * Checks a discovery answer. `tokenEndpointRequired` is false when
 * AUTH_TOKEN_URL is set. Throws a GrantError: `transient` for what may pass
 * (5xx, 429), `wrong_url` for an answer that is not this issuer's document.
 */
export function checkDiscovery (issuer: string, res: TokenEndpointResponse, tokenEndpointRequired: boolean): Endpoints {
  const url = wellKnownUrl(issuer)
  if (res.status >= 500 || res.status === 429 || res.status === 408) {
    throw new GrantError(`discovery: ${url} answered ${res.status}`, 'transient', { status: res.status })
  }
  if (res.status !== 200) {
    const redirect = res.status >= 300 && res.status < 400 ? ` (a redirect${res.location === undefined ? '' : ` to ${res.location.slice(0, 200)}`})` : ''
    throw new GrantError(`discovery: ${url} answered ${res.status}${redirect}: AUTH_ISSUER_URL is not an OpenID Connect issuer (Keycloak's is https://host/realms/<realm>)`, 'wrong_url', { status: res.status })
  }
  let doc: unknown
  try {
    doc = JSON.parse(res.body)
  } catch {
    throw new GrantError(`discovery: ${url} answered 200 with a body that is not JSON: AUTH_ISSUER_URL is not an OpenID Connect issuer`, 'wrong_url', { status: 200 })
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) {
    throw new GrantError(`discovery: ${url} answered JSON that is not an object`, 'wrong_url', { status: 200 })
  }
  const fields = doc as Record<string, unknown>
  const named = fields.issuer
  if (typeof named !== 'string' || (named !== issuer && named !== issuer.replace(/\/+$/, ''))) {
    const shown = typeof named === 'string' ? JSON.stringify(named.slice(0, 200)) : 'none'
    throw new GrantError(`discovery: the document at ${url} names the issuer ${shown}, not ${issuer}: set AUTH_ISSUER_URL to the issuer exactly as the server names it`, 'wrong_url', { status: 200 })
  }
  // An https issuer's endpoints are https too: a document that sends the
  // credentials over plain http is refused, not followed.
  const endpoint = (name: string): string | undefined => {
    const value = fields[name]
    if (value === undefined || value === null) return undefined
    let parsed: URL | undefined
    try { parsed = typeof value === 'string' ? new URL(value) : undefined } catch {}
    const https = new URL(issuer).protocol === 'https:'
    if (parsed === undefined || !(parsed.protocol === 'https:' || (!https && parsed.protocol === 'http:')) || parsed.hash !== '' || parsed.username !== '' || parsed.password !== '') {
      throw new GrantError(`discovery: ${name} in ${url} is not ${https ? 'an https' : 'an http(s)'} URL`, 'wrong_url', { status: 200 })
    }
    return parsed.href
  }
  const tokenUrl = endpoint('token_endpoint')
  if (tokenUrl === undefined && tokenEndpointRequired) {
    throw new GrantError(`discovery: ${url} names no token_endpoint (set AUTH_TOKEN_URL)`, 'wrong_url', { status: 200 })
  }
  const endSessionUrl = endpoint('end_session_endpoint')
  const revocationUrl = endpoint('revocation_endpoint')
  return {
    ...(tokenUrl !== undefined && { tokenUrl }),
    ...(endSessionUrl !== undefined && { endSessionUrl }),
    ...(revocationUrl !== undefined && { revocationUrl })
  }
}
