import * as oauth from 'oauth4webapi'
import { wellKnownUrl } from '../config/auth.js'
import { GrantError, type Answer, type Shorten } from './grant.js'

/**
 * OpenID Connect discovery (AUTH_ISSUER_URL): the realm's endpoints read
 * from its `/.well-known/openid-configuration`. oauth4webapi checks that
 * the document names the configured issuer (RFC 8414 §3.3); the sidecar
 * adds what it needs on top.
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

/** Where the document comes from: the issuer it must name, and the URL it is fetched from (the issuer's own, or AUTH_DISCOVERY_URL's). */
export interface DiscoverySource {
  issuer: string
  url: string
}

/**
 * Checks a discovery answer. `tokenEndpointRequired` is false when
 * AUTH_TOKEN_URL is set. Throws a GrantError: `transient` for what may pass
 * (5xx, 429), `wrong_url` for an answer that is not this issuer's document.
 *
 * Fetched from another address than the issuer's (a Kubernetes Service in
 * front of Keycloak, whose hostname is the public one), the endpoints the
 * document names under the public issuer are reached under that address:
 * Keycloak lists its front-channel endpoints (and, without a dynamic
 * backchannel, every endpoint) at the public hostname, which the pod may not
 * reach.
 */
export async function checkDiscovery (source: DiscoverySource, answer: Answer, res: Response, configuredTokenUrl: string | undefined, shorten: Shorten, presentsCertificate = false): Promise<Endpoints> {
  const { issuer, url } = source
  // the variable that named where the document is fetched
  const fetched = url === wellKnownUrl(issuer) ? 'AUTH_ISSUER_URL' : 'AUTH_DISCOVERY_URL'
  if (answer.status >= 500 || answer.status === 429 || answer.status === 408) {
    throw new GrantError(`discovery: ${url} answered ${answer.status}`, 'transient', { status: answer.status })
  }
  if (answer.status !== 200) {
    const redirect = answer.status >= 300 && answer.status < 400 ? ` (a redirect${answer.location === undefined ? '' : ` to ${shorten(answer.location, 200)}`})` : ''
    throw new GrantError(`discovery: ${url} answered ${answer.status}${redirect}: ${fetched} is not an OpenID Connect issuer (Keycloak's is https://host/realms/<realm>)`, 'wrong_url', { status: answer.status })
  }
  let named: unknown
  try {
    named = (JSON.parse(answer.body) as { issuer?: unknown }).issuer
  } catch {
    throw new GrantError(`discovery: ${url} answered 200 with a body that is not JSON: ${fetched} is not an OpenID Connect issuer`, 'wrong_url', { status: 200 })
  }
  // A trailing slash in AUTH_ISSUER_URL is forgiven: the document's issuer is then the one expected.
  const expected = typeof named === 'string' && named === issuer.replace(/\/+$/, '') ? named : issuer
  let doc: oauth.AuthorizationServer
  try {
    doc = await oauth.processDiscoveryResponse(new URL(expected), res)
  } catch (err) {
    const shown = typeof named === 'string' ? JSON.stringify(shorten(named, 200)) : 'none'
    const why = typeof named === 'string' && named !== expected
      ? `names the issuer ${shown}, not ${issuer}: set AUTH_ISSUER_URL to the issuer exactly as the server names it${fetched === 'AUTH_ISSUER_URL' ? ` (and, should the sidecar reach it by another address, AUTH_DISCOVERY_URL=${issuer.replace(/\/+$/, '')})` : ''}`
      : `is not an issuer's metadata (${shorten((err as Error).message.replace(/"response" body /g, ''), 200)})`
    throw new GrantError(`discovery: the document at ${url} ${why}`, 'wrong_url', { status: 200, cause: err })
  }
  // An https document's endpoints are https too: a document that sends the
  // credentials over plain http is refused, not followed.
  const https = new URL(url).protocol === 'https:'
  const rebase = rebaser(doc.issuer, url)
  // With a client certificate, the endpoints that take one (RFC 8705 §5), where the document names them.
  const aliases = presentsCertificate && typeof doc.mtls_endpoint_aliases === 'object' && doc.mtls_endpoint_aliases !== null ? doc.mtls_endpoint_aliases : undefined
  const endpoint = (name: 'token_endpoint' | 'end_session_endpoint' | 'revocation_endpoint'): string | undefined => {
    const value = aliases?.[name] ?? doc[name]
    if (value === undefined || value === null) return undefined
    let parsed: URL | undefined
    try { parsed = typeof value === 'string' ? new URL(value) : undefined } catch {}
    if (parsed === undefined || !(parsed.protocol === 'https:' || parsed.protocol === 'http:') || parsed.hash !== '' || parsed.username !== '' || parsed.password !== '') {
      throw new GrantError(`discovery: ${name} in ${url} is not ${https ? 'an https' : 'an http(s)'} URL`, 'wrong_url', { status: 200 })
    }
    const reached = rebase(parsed.href)
    if (https && new URL(reached).protocol !== 'https:') throw new GrantError(`discovery: ${name} in ${url} is not an https URL`, 'wrong_url', { status: 200 })
    return reached
  }
  const tokenUrl = endpoint('token_endpoint')
  if (tokenUrl === undefined && configuredTokenUrl === undefined) {
    throw new GrantError(`discovery: ${url} names no token_endpoint (set AUTH_TOKEN_URL)`, 'wrong_url', { status: 200 })
  }
  // The session's end carries the refresh token and the client's
  // credential: only to the issuer's, the document's or the token endpoint's origin.
  const trusted = new Set([new URL(issuer).origin, new URL(url).origin, new URL(configuredTokenUrl ?? tokenUrl!).origin])
  const ignored: string[] = []
  const origins = fetched === 'AUTH_ISSUER_URL' ? 'the issuer and the token endpoint' : 'the issuer, the discovery document and the token endpoint'
  const sameOrigin = (name: 'end_session_endpoint' | 'revocation_endpoint'): string | undefined => {
    const found = endpoint(name)
    if (found === undefined || trusted.has(new URL(found).origin)) return found
    ignored.push(`${name} ${found} is on another origin than ${origins}: not used`)
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

/**
 * Maps an endpoint under the issuer the document names to the same place
 * under the address the document was fetched from; the identity when that
 * address is the issuer's own.
 */
function rebaser (issuer: string, documentUrl: string): (endpoint: string) => string {
  const base = documentUrl.replace(/\/\.well-known\/[^/]+$/, '')
  const named = issuer.replace(/\/+$/, '')
  if (base === named) return (endpoint) => endpoint
  return (endpoint) => endpoint.startsWith(`${named}/`) ? base + endpoint.slice(named.length) : endpoint
}
