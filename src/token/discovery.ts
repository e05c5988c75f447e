import * as oauth from 'oauth4webapi'
import { GrantError, type Answer, type Shorten } from './grant.js'

/**
 * OpenID Connect discovery (AUTH_ISSUER_URL): the realm's endpoints read
 * from `{issuer}/.well-known/openid-configuration`. oauth4webapi checks the
 * document the way OpenID Connect Discovery §4.3 says (it must name the
 * issuer it was fetched from); the sidecar adds what it needs on top.
 */
export interface Endpoints {
  /** the issuer as the document names it */
  issuer: string
  /** undefined when AUTH_TOKEN_URL wins and the document has none */
  tokenUrl?: string
  endSessionUrl?: string
  revocationUrl?: string
  /** endpoints named but not used, and why (for the log) */
  ignored: string[]
  /** the endpoints are the document's mtls_endpoint_aliases (RFC 8705 §5): the sidecar presents a client certificate */
  mtls?: true
}

export function wellKnownUrl (issuer: string): string {
  return `${issuer.replace(/\/+$/, '')}/.well-known/openid-configuration`
}

/**
 * Checks a discovery answer. `tokenEndpointRequired` is false when
 * AUTH_TOKEN_URL is set. Throws a GrantError: `transient` for what may pass
 * (5xx, 429), `wrong_url` for an answer that is not this issuer's document.
 */
export async function checkDiscovery (issuer: string, answer: Answer, res: Response, configuredTokenUrl: string | undefined, shorten: Shorten, presentsCertificate = false): Promise<Endpoints> {
  const url = wellKnownUrl(issuer)
  if (answer.status >= 500 || answer.status === 429 || answer.status === 408) {
    throw new GrantError(`discovery: ${url} answered ${answer.status}`, 'transient', { status: answer.status })
  }
  if (answer.status !== 200) {
    const redirect = answer.status >= 300 && answer.status < 400 ? ` (a redirect${answer.location === undefined ? '' : ` to ${shorten(answer.location, 200)}`})` : ''
    throw new GrantError(`discovery: ${url} answered ${answer.status}${redirect}: AUTH_ISSUER_URL is not an OpenID Connect issuer (Keycloak's is https://host/realms/<realm>)`, 'wrong_url', { status: answer.status })
  }
  let named: unknown
  try {
    named = (JSON.parse(answer.body) as { issuer?: unknown }).issuer
  } catch {
    throw new GrantError(`discovery: ${url} answered 200 with a body that is not JSON: AUTH_ISSUER_URL is not an OpenID Connect issuer`, 'wrong_url', { status: 200 })
  }
  // A trailing slash in AUTH_ISSUER_URL is forgiven: the document's issuer is then the one expected.
  const expected = typeof named === 'string' && named === issuer.replace(/\/+$/, '') ? named : issuer
  let doc: oauth.AuthorizationServer
  try {
    doc = await oauth.processDiscoveryResponse(new URL(expected), res)
  } catch (err) {
    const shown = typeof named === 'string' ? JSON.stringify(shorten(named, 200)) : 'none'
    const why = typeof named === 'string' && named !== expected
      ? `names the issuer ${shown}, not ${issuer}: set AUTH_ISSUER_URL to the issuer exactly as the server names it`
      : `is not an issuer's metadata (${shorten((err as Error).message.replace(/"response" body /g, ''), 200)})`
    throw new GrantError(`discovery: the document at ${url} ${why}`, 'wrong_url', { status: 200, cause: err })
  }
  // An https issuer's endpoints are https too: a document that sends the
  // credentials over plain http is refused, not followed.
  const https = new URL(issuer).protocol === 'https:'
  // With a client certificate, the endpoints that take one (RFC 8705 §5), where the document names them.
  const aliases = presentsCertificate && typeof doc.mtls_endpoint_aliases === 'object' && doc.mtls_endpoint_aliases !== null ? doc.mtls_endpoint_aliases : undefined
  const endpoint = (name: 'token_endpoint' | 'end_session_endpoint' | 'revocation_endpoint'): string | undefined => {
    const value = aliases?.[name] ?? doc[name]
    if (value === undefined || value === null) return undefined
    let parsed: URL | undefined
    try { parsed = typeof value === 'string' ? new URL(value) : undefined } catch {}
    if (parsed === undefined || !(parsed.protocol === 'https:' || (!https && parsed.protocol === 'http:')) || parsed.hash !== '' || parsed.username !== '' || parsed.password !== '') {
      throw new GrantError(`discovery: ${name} in ${url} is not ${https ? 'an https' : 'an http(s)'} URL`, 'wrong_url', { status: 200 })
    }
    return parsed.href
  }
  const tokenUrl = endpoint('token_endpoint')
  if (tokenUrl === undefined && configuredTokenUrl === undefined) {
    throw new GrantError(`discovery: ${url} names no token_endpoint (set AUTH_TOKEN_URL)`, 'wrong_url', { status: 200 })
  }
  // The session's end carries the refresh token and the client's
  // credential: only to the issuer's or the token endpoint's origin.
  const trusted = new Set([new URL(issuer).origin, new URL(configuredTokenUrl ?? tokenUrl!).origin])
  const ignored: string[] = []
  const sameOrigin = (name: 'end_session_endpoint' | 'revocation_endpoint'): string | undefined => {
    const found = endpoint(name)
    if (found === undefined || trusted.has(new URL(found).origin)) return found
    ignored.push(`${name} ${found} is on another origin than the issuer and the token endpoint: not used`)
    return undefined
  }
  const endSessionUrl = sameOrigin('end_session_endpoint')
  const revocationUrl = sameOrigin('revocation_endpoint')
  return {
    issuer: doc.issuer,
    ignored,
    ...(aliases !== undefined && { mtls: true as const }),
    ...(tokenUrl !== undefined && { tokenUrl }),
    ...(endSessionUrl !== undefined && { endSessionUrl }),
    ...(revocationUrl !== undefined && { revocationUrl })
  }
}
