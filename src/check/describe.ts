import { decodeJwt } from 'jose'
import { defaultRouteOf, type Config, type CredentialAuth, type RouteConfig } from '../config/load.js'
import { GrantError, type TokenSet } from '../token/grant.js'

/** What `check` says of the configuration, a token, or a failure: human text, nothing secret. */

export function describeConfig (routes: readonly RouteConfig[]): string {
  const byDefault = defaultRouteOf({ routes })
  const described = routes.slice(1).map((route) => {
    const where = route.port !== undefined ? `port ${route.port}` : `path ${route.path}`
    const c = route.credential
    const token = c.exchange !== undefined
      ? `token exchange for audience ${c.exchange.audience}${c.exchange.subject.name === 'default' ? '' : ` of route ${c.exchange.subject.name}'s`}`
      : c.name === route.name ? `its own credential: ${describeAuth(c.auth)}` : `route ${c.name}'s credential`
    return `route ${route.name} on ${where} to ${route.origin + route.basePath}, ${token}`
  })
  return [`${describeAuth(byDefault.credential.auth)}, upstream ${byDefault.origin + byDefault.basePath}`, ...described].join('; ')
}

function describeAuth (auth: CredentialAuth): string {
  if (auth.mode === 'basic') return 'basic mode'
  const endpoint = auth.tokenUrl !== undefined ? `token URL ${auth.tokenUrl}` : `issuer ${auth.issuerUrl ?? ''}`
  const params = auth.params.length === 0 ? '' : `, extra parameters ${auth.params.map(([n]) => n).join(', ')}`
  const dpop = auth.dpop === undefined ? '' : `, DPoP-bound tokens (${auth.dpop} key)`
  return `oauth2, ${auth.grantType} grant as client ${auth.clientId} (${auth.clientAuth})${dpop}, ${endpoint}${params}`
}

export function lifetimes (set: TokenSet): string {
  const refresh = set.refreshToken === undefined
    ? 'no refresh token (renewal is a new grant)'
    : set.refreshExpiresInMs === undefined ? 'a refresh token without a fixed lifetime' : `a refresh token for ${Math.round(set.refreshExpiresInMs / 1000)} s`
  return `access token for ${Math.round(set.expiresInMs / 1000)} s, ${refresh}`
}

/** What an operator checks in a token (issuer, audience, scope, expiry), read from a JWT's payload; never the token. */
export function claims (token: string): string {
  const payload = payloadOf(token)
  if (payload === undefined) return 'the access token is opaque (not a JWT): its claims are not shown'
  const text = (v: unknown): string => Array.isArray(v) ? v.filter((x) => typeof x === 'string').join(', ') : typeof v === 'string' ? v : 'none'
  const exp = typeof payload.exp === 'number' && Number.isFinite(payload.exp) && Math.abs(payload.exp) < 1e11
    ? new Date(payload.exp * 1000).toISOString()
    : 'none'
  return `issuer ${text(payload.iss)}, audience ${text(payload.aud)}, scope "${text(payload.scope)}", expires ${exp}`
}

/** In DPoP mode: the token's type and the key it is bound to (`cnf.jkt`, when the token is a JWT that says). */
export function binding (key: { alg: string, thumbprint: string } | undefined, set: TokenSet): string {
  if (key === undefined) return ''
  const jkt = payloadOf(set.accessToken)?.cnf
  const named = typeof jkt === 'object' && jkt !== null ? (jkt as { jkt?: unknown }).jkt : undefined
  const bound = named === undefined ? '' : named === key.thumbprint ? ', its cnf.jkt names it' : ', but its cnf.jkt names another key'
  return `; token_type ${set.tokenType}, bound to the sidecar's ${key.alg} key ${key.thumbprint}${bound}`
}

/** A client certificate as `check` shows it: never its key. */
export function describeCertificate (c: { subject: string, notAfter: Date, thumbprint: string }): string {
  return `subject ${c.subject}, expires ${c.notAfter.toISOString()}, x5t#S256 ${c.thumbprint}`
}

/**
 * Whether a token obtained with a client certificate is bound to it
 * (RFC 8705 `cnf.x5t#S256`, read from a JWT for display only), and whether
 * each upstream it goes to gets that certificate: `failed` when one does not.
 */
export function certificateBinding (set: TokenSet, upstreams: Array<{ route: string, thumbprint: string | undefined }>): { text: string, failed: boolean } {
  if (set.certificate === undefined) return { text: '', failed: false }
  const payload = payloadOf(set.accessToken)
  if (payload === undefined) return { text: '; the token is opaque: whether it is bound to the client certificate cannot be seen', failed: false }
  const cnf = payload.cnf
  const x5t = typeof cnf === 'object' && cnf !== null ? (cnf as Record<string, unknown>)['x5t#S256'] : undefined
  if (typeof x5t !== 'string') return { text: '; not bound to the client certificate (no cnf x5t#S256)', failed: false }
  const others = upstreams.filter((u) => u.thumbprint !== x5t)
  if (others.length === 0) return { text: `; bound to the client certificate (cnf x5t#S256 ${x5t}), which the upstream gets too`, failed: false }
  const which = others.map((u) => `${u.route === 'default' ? 'the upstream' : `route ${u.route}'s upstream`} gets ${u.thumbprint === undefined ? 'no client certificate' : `x5t#S256 ${u.thumbprint}`}`).join(', ')
  return { text: `; bound to the client certificate x5t#S256 ${x5t}, but ${which}: the token will be refused there. Give UPSTREAM_TLS_CERT_FILE and UPSTREAM_TLS_KEY_FILE the files of AUTH_TLS_CERT_FILE and AUTH_TLS_KEY_FILE`, failed: true }
}

/** A JWT's payload, unverified (for what `check` shows), or undefined for an opaque token. */
export function payloadOf (token: string): Record<string, unknown> | undefined {
  try {
    return decodeJwt(token)
  } catch {
    return undefined
  }
}

const TLS_CODES = /CERT|SELF_SIGNED|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER|ERR_TLS|ERR_SSL|EPROTO/
const NETWORK_CODES = /ECONNREFUSED|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ECONNRESET|UND_ERR_CONNECT_TIMEOUT|UND_ERR_SOCKET|timed out|upstream_unreachable|upstream_timeout|UND_ERR_HEADERS_TIMEOUT/

/**
 * What to change, for a failed step: credentials, URLs, TLS trust or the
 * egress proxy. `auth`: the failing credential's settings, whose
 * AUTH_ISSUER_URL tells a failed discovery (its message says what to
 * change) from a wrong token URL.
 */
export function advice (failure: unknown, egress: Config['egress'], side: 'auth' | 'upstream', auth?: CredentialAuth): string {
  const message = failure instanceof Error ? failure.message : String(failure)
  const proxy = egress.httpsProxy !== undefined || egress.httpProxy !== undefined
  if (/client certificate/.test(message)) return ''
  if (TLS_CODES.test(message)) {
    return `. TLS trust: the server's certificate is not trusted here; give its CA with ${side === 'auth' ? 'AUTH_TLS_CA_FILE' : 'UPSTREAM_TLS_CA_FILE'}=/path/ca.pem, or to Node.js with NODE_EXTRA_CA_CERTS=/path/ca.pem in the environment (not in .env)`
  }
  // a refusal's message already names what to change, as the log says it
  if (failure instanceof GrantError && failure.kind === 'rejected') return ''
  if (failure instanceof GrantError && failure.kind === 'wrong_url') {
    return auth?.mode === 'oauth2' && auth.issuerUrl !== undefined && /^discovery/.test(message)
      ? ''
      : '. Check AUTH_URL and AUTH_REALM, or set AUTH_ISSUER_URL or AUTH_TOKEN_URL'
  }
  if (NETWORK_CODES.test(message)) {
    const where = side === 'auth' ? 'the auth server' : 'the upstream (BASE_URL)'
    return proxy
      ? `. ${where} cannot be reached through the egress proxy: check HTTPS_PROXY/HTTP_PROXY and NO_PROXY`
      : `. ${where} cannot be reached from here: check the URL, DNS and firewalls (or set HTTPS_PROXY if egress goes through a proxy)`
  }
  return ''
}

/**
 * One line, printable: what a server said cannot move the cursor, colour
 * the terminal, or reorder what is shown (bidirectional controls).
 */
export function printable (text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, '?')
}
