import * as oauth from 'oauth4webapi'
import { metadataUrl, wellKnownUrl } from '../config/auth.js'
import type { Logger } from '../logger.js'
import { answerOf, GrantError, type Answer, type Shorten } from './grant.js'

/**
 * Discovery (AUTH_ISSUER_URL): the auth server's endpoints read from its
 * OpenID Connect document (`/.well-known/openid-configuration`) or its
 * RFC 8414 metadata (`/.well-known/oauth-authorization-server`). The
 * document must name the configured issuer exactly (RFC 8414 §3.3); the
 * sidecar adds what it needs on top.
 */
export interface Endpoints {
  /** the issuer as the document names it */
  issuer: string
  /** where the document was fetched */
  url: string
  /** undefined when AUTH_TOKEN_URL wins and the document has none */
  tokenUrl?: string
  endSessionUrl?: string
  revocationUrl?: string
  /** what the log and `check` warn about: endpoints named but not used and why, a client authentication method the server does not list */
  ignored: string[]
  /** the endpoints are the document's mtls_endpoint_aliases (RFC 8705 §5): the sidecar presents a client certificate */
  mtls?: true
  /** dpop_signing_alg_values_supported, where the document lists them */
  dpopAlgs?: string[]
  /** token_endpoint_auth_methods_supported, where the document lists them */
  authMethods?: string[]
}

/** Where the document comes from: the issuer it must name, and the URL it is fetched from (the issuer's own, or AUTH_DISCOVERY_URL's). */
export interface DiscoverySource {
  issuer: string
  url: string
  /** documents tried before this one that were not there (404), said with this one's failure */
  missing?: string[]
}

/** How the document is fetched: a GET of `url` (bounded, the auth server's connections), and what the check needs. */
export interface DiscoveryFetch extends DiscoverySource {
  get: (url: string) => Promise<Response>
  configuredTokenUrl: string | undefined
  shorten: Shorten
  presentsCertificate: boolean
  log: Logger
}

/**
 * The document fetched from the URL as configured (AUTH_DISCOVERY_URL may
 * be any address), not one derived from the issuer as oauth4webapi's
 * discoveryRequest would, and checked. The issuer's OpenID Connect
 * document, when not there, gives way to its RFC 8414 metadata (OAuth-only
 * servers publish just that); a document AUTH_DISCOVERY_URL names is the
 * only one fetched.
 */
export async function fetchDiscovery (o: DiscoveryFetch): Promise<Endpoints> {
  const { issuer } = o
  const missing: string[] = []
  let at = o.url
  for (;;) {
    const from = at
    o.log.debug({ event: 'discovery', url: from }, 'discovery request')
    const res = await o.get(from)
    const answer = await answerOf(res)
    const metadata = answer.status === 404 && missing.length === 0 && from === wellKnownUrl(issuer) ? metadataUrl(issuer) : undefined
    if (metadata === undefined) return await checkDiscovery({ issuer, url: from, missing }, answer, res, o.configuredTokenUrl, o.shorten, o.presentsCertificate)
    await res.body?.cancel().catch(() => {})
    missing.push(from)
    at = metadata
  }
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
  const fetched = url === wellKnownUrl(issuer) || url === metadataUrl(issuer) ? 'AUTH_ISSUER_URL' : 'AUTH_DISCOVERY_URL'
  if (answer.status >= 500 || answer.status === 429 || answer.status === 408) {
    throw new GrantError(`discovery: ${url} answered ${answer.status}`, 'transient', { status: answer.status })
  }
  if (answer.status !== 200) {
    const redirect = answer.status >= 300 && answer.status < 400 ? ` (a redirect${answer.location === undefined ? '' : ` to ${shorten(answer.location, 200)}`})` : ''
    const missing = source.missing ?? []
    const tried = [...missing.map((u) => `${u} answered 404`), `${url} answered ${answer.status}${redirect}`].join(', then ')
    throw new GrantError(`discovery: ${tried}: ${fetched} is not an OpenID Connect issuer${missing.length > 0 ? ' nor an RFC 8414 authorization server' : ''} (Keycloak's is https://host/realms/<realm>)`, 'wrong_url', { status: answer.status })
  }
  let named: unknown
  try {
    named = (JSON.parse(answer.body) as { issuer?: unknown }).issuer
  } catch {
    throw new GrantError(`discovery: ${url} answered 200 with a body that is not JSON: ${fetched} is not an OpenID Connect issuer`, 'wrong_url', { status: 200 })
  }
  // Issuers compare exactly (RFC 8414 §3.3): a trailing slash makes another
  // issuer, a bare origin's too.
  if (typeof named === 'string' && named !== issuer) {
    const slash = named.replace(/\/+$/, '') === issuer.replace(/\/+$/, '') ? ' (they differ in a trailing slash, and issuers compare exactly)' : ''
    throw new GrantError(`discovery: the document at ${url} names the issuer ${JSON.stringify(shorten(named, 200))}, not ${issuer}${slash}: set AUTH_ISSUER_URL to the issuer exactly as the server names it${fetched === 'AUTH_ISSUER_URL' && slash === '' ? ` (and, should the sidecar reach it by another address, AUTH_DISCOVERY_URL=${issuer.replace(/\/+$/, '')})` : ''}`, 'wrong_url', { status: 200 })
  }
  let doc: oauth.AuthorizationServer
  try {
    doc = await oauth.processDiscoveryResponse(new URL(typeof named === 'string' ? named : issuer), res)
  } catch (err) {
    throw new GrantError(`discovery: the document at ${url} is not an issuer's metadata (${shorten((err as Error).message.replace(/"response" body /g, ''), 200)})`, 'wrong_url', { status: 200, cause: err })
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
  const dpopAlgs = strings(doc.dpop_signing_alg_values_supported)
  const authMethods = strings(doc.token_endpoint_auth_methods_supported)
  return {
    issuer: doc.issuer,
    url,
    ignored,
    ...(dpopAlgs !== undefined && { dpopAlgs }),
    ...(authMethods !== undefined && { authMethods }),
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
  // RFC 8414's URL has the issuer's path after the well-known part; OpenID Connect's, before it
  const { origin, pathname } = new URL(documentUrl)
  const inserted = /^\/\.well-known\/[^/]+(\/.*)?$/.exec(pathname)
  const base = inserted !== null ? origin + (inserted[1] ?? '') : documentUrl.replace(/\/\.well-known\/[^/]+$/, '')
  const named = issuer.replace(/\/+$/, '')
  if (base === named) return (endpoint) => endpoint
  return (endpoint) => endpoint.startsWith(`${named}/`) ? base + endpoint.slice(named.length) : endpoint
}

/** A metadata field that lists strings, as it is; undefined when the document has no such list. */
function strings (value: unknown): string[] | undefined {
  return Array.isArray(value) && value.every((v) => typeof v === 'string') ? value as string[] : undefined
}

/** The issuer a token URL implies: Keycloak's realm (the URL without /protocol/openid-connect/token), else its origin. */
export function issuerOf (tokenUrl: string): string {
  return /^(.*\/realms\/[^/]+)\/protocol\/openid-connect\/token$/.exec(tokenUrl)?.[1] ?? new URL(tokenUrl).origin
}
