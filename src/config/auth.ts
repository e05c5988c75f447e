import { byCertificate, clientAuthSettings } from './client-auth.js'
import { tlsNames, tlsPaths } from './tls.js'
import type { VariableName } from './schema.js'
import type { ClientAuth, CredentialAuth, CredentialSources, DpopAlgorithm, PrimaryGrant } from './types.js'
import { credentialSource, parseHttpUrl, tokenParams, type Raw } from './values.js'

/** One credential's settings: how its token is obtained, and where its secrets come from. */
export interface AuthSettings {
  auth: CredentialAuth
  credentials: CredentialSources
}

/**
 * The AUTH_* settings read and checked together: the mode, the grant, the
 * token endpoint (derived, given or discovered), the client's
 * authentication and the sources of its secrets. `data` is what was set,
 * before the schema's defaults.
 */
export function parseAuth (raw: Raw, data: Record<string, unknown>, cwd: string, problems: string[], warnings: string[]): AuthSettings {
  const str = (name: VariableName): string | undefined => {
    const v = raw[name]
    return v === undefined || v === '' ? undefined : String(v)
  }
  const mode = str('AUTH_MODE') === 'basic' ? 'basic' : 'oauth2'

  const grantType: PrimaryGrant = str('AUTH_GRANT_TYPE') === 'client_credentials' ? 'client_credentials' : 'password'
  const serviceAccount = mode === 'basic' || grantType === 'password'
  if (!serviceAccount) {
    for (const name of ['AUTH_USERNAME', 'AUTH_USERNAME_FILE', 'AUTH_PASSWORD', 'AUTH_PASSWORD_FILE'] as const) {
      if (raw[name] !== undefined) warnings.push(`${name} is not used by the client_credentials grant (AUTH_GRANT_TYPE)`)
    }
  }
  const client = mode === 'oauth2' ? clientAuthSettings(raw, cwd, grantType, problems, warnings) : { clientAuth: 'client_secret_post' as ClientAuth, secretNeeded: false }
  const credentials = {
    username: serviceAccount ? credentialSource('AUTH_USERNAME', 'AUTH_USERNAME_FILE', raw, cwd, problems, true) : undefined,
    password: serviceAccount ? credentialSource('AUTH_PASSWORD', 'AUTH_PASSWORD_FILE', raw, cwd, problems, true) : undefined,
    clientSecret: credentialSource('AUTH_CLIENT_SECRET', 'AUTH_CLIENT_SECRET_FILE', raw, cwd, problems, false)
  }
  if (client.secretNeeded && credentials.clientSecret === undefined && raw.AUTH_CLIENT_SECRET === undefined && raw.AUTH_CLIENT_SECRET_FILE === undefined) {
    problems.push(client.clientAuth !== 'client_secret_post'
      ? `AUTH_CLIENT_SECRET (or AUTH_CLIENT_SECRET_FILE) is required by AUTH_CLIENT_AUTH=${client.clientAuth}`
      : 'AUTH_CLIENT_SECRET (or AUTH_CLIENT_SECRET_FILE) is required by the client_credentials grant: a confidential client with "Service accounts roles" on (or a signed client assertion: AUTH_CLIENT_AUTH=private_key_jwt or federated_jwt)')
  }

  let auth: CredentialAuth = { mode: 'basic' }
  if (mode === 'oauth2') {
    let tokenUrl = parseHttpUrl('AUTH_TOKEN_URL', str('AUTH_TOKEN_URL'), problems, false)?.href
    let alternateTokenUrl: string | undefined
    // kept as written: the document must name the issuer exactly, and URL
    // parsing would add a slash to a bare origin (https://h becomes https://h/)
    const issuerUrl = parseHttpUrl('AUTH_ISSUER_URL', str('AUTH_ISSUER_URL'), problems, false) === undefined ? undefined : str('AUTH_ISSUER_URL')?.trim()
    const givenDiscoveryUrl = parseHttpUrl('AUTH_DISCOVERY_URL', str('AUTH_DISCOVERY_URL'), problems, false)
    const discoveryUrl = discoveryUrlOf(issuerUrl, givenDiscoveryUrl, str('AUTH_ISSUER_URL') !== undefined, problems)
    if (issuerUrl !== undefined && str('AUTH_URL') !== undefined) {
      warnings.push(`AUTH_URL is not used when AUTH_ISSUER_URL is set: the token endpoint comes from ${str('AUTH_TOKEN_URL') === undefined ? 'discovery' : 'AUTH_TOKEN_URL'}`)
    }
    if (tokenUrl === undefined && str('AUTH_TOKEN_URL') === undefined && str('AUTH_ISSUER_URL') === undefined) {
      const authUrl = parseHttpUrl('AUTH_URL', str('AUTH_URL'), problems, false)
      const base = authUrl?.href.replace(/\/+$/, '')
      const realm = encodeURIComponent(str('AUTH_REALM') ?? '')
      if (base !== undefined && /\/realms(\/|$)/.test(authUrl!.pathname)) {
        problems.push('AUTH_URL must be the server\'s base URL, without /realms/...: the realm goes in AUTH_REALM (or set the whole AUTH_TOKEN_URL)')
      } else if (base !== undefined && /\/auth$/.test(base)) {
        problems.push('AUTH_URL must not end in /auth: the sidecar adds /auth/realms/... itself, and tries the layout without /auth should that not answer (or set the whole AUTH_TOKEN_URL)')
      } else if (base !== undefined) {
        tokenUrl = `${base}/auth/realms/${realm}/protocol/openid-connect/token`
        alternateTokenUrl = `${base}/realms/${realm}/protocol/openid-connect/token`
      } else if (str('AUTH_URL') === undefined) {
        problems.push('AUTH_URL is required in oauth2 mode (or set AUTH_ISSUER_URL or AUTH_TOKEN_URL)')
      }
    }
    const tls = tlsPaths({ cert: str('AUTH_TLS_CERT_FILE'), key: str('AUTH_TLS_KEY_FILE'), ca: str('AUTH_TLS_CA_FILE'), names: tlsNames('AUTH_TLS') }, cwd, problems)
    // a client certificate goes only over TLS: over http it would silently not be presented
    // the address dialled decides: the discovery document's, when given apart from the issuer
    const plain = [tokenUrl, givenDiscoveryUrl?.href ?? issuerUrl].find((u) => u?.startsWith('http:'))
    if (plain !== undefined && byCertificate(client.clientAuth)) {
      problems.push(`AUTH_CLIENT_AUTH=${client.clientAuth} needs an https auth server: ${plain} is http, where no client certificate is presented`)
    } else if (plain !== undefined && tls?.certFile !== undefined) {
      warnings.push(`AUTH_TLS_CERT_FILE is not presented: ${plain} is http`)
    }
    const clientId = str('AUTH_CLIENT_ID')
    if (clientId === undefined) problems.push('AUTH_CLIENT_ID is required in oauth2 mode')
    const scope = str('AUTH_SCOPE')
    auth = {
      mode: 'oauth2',
      ...(tokenUrl !== undefined && { tokenUrl }),
      ...(issuerUrl !== undefined && { issuerUrl }),
      ...(discoveryUrl !== undefined && { discoveryUrl }),
      ...(alternateTokenUrl !== undefined && { alternateTokenUrl }),
      grantType,
      clientAuth: client.clientAuth,
      ...(client.keyAlg !== undefined && { clientKeyAlg: client.keyAlg }),
      ...(client.keyId !== undefined && { clientKeyId: client.keyId }),
      clientId: clientId ?? '',
      ...(scope !== undefined && { scope }),
      params: tokenParams(str('AUTH_TOKEN_PARAMS'), problems),
      logoutOnShutdown: raw.AUTH_LOGOUT_ON_SHUTDOWN !== false,
      ...(raw.AUTH_DPOP === true && { dpop: (str('AUTH_DPOP_ALG') ?? 'ES256') as DpopAlgorithm }),
      ...(raw.AUTH_DPOP === true && data.AUTH_DPOP_ALG !== undefined && data.AUTH_DPOP_ALG !== '' && { dpopAlgSet: true as const }),
      ...(tls !== undefined && { tls })
    }
  } else {
    if (raw.AUTH_DPOP === true) warnings.push('AUTH_DPOP is not used in basic mode: there is no token to bind')
    if (raw.AUTH_DISCOVERY_URL !== undefined) warnings.push('AUTH_DISCOVERY_URL is not used in basic mode: there is no auth server')
    for (const name of ['AUTH_TLS_CERT_FILE', 'AUTH_TLS_KEY_FILE', 'AUTH_TLS_CA_FILE'] as const) {
      if (raw[name] !== undefined) warnings.push(`${name} is not used in basic mode: there is no auth server to present it to`)
    }
  }
  if (data.AUTH_DPOP_ALG !== undefined && raw.AUTH_DPOP !== true) warnings.push('AUTH_DPOP_ALG is used only with AUTH_DPOP=true')

  return {
    auth,
    credentials: {
      ...(credentials.username && { username: credentials.username }),
      ...(credentials.password && { password: credentials.password }),
      ...(credentials.clientSecret && { clientSecret: credentials.clientSecret }),
      ...('clientKey' in client && client.clientKey !== undefined && { clientKey: client.clientKey }),
      ...('clientAssertion' in client && client.clientAssertion !== undefined && { clientAssertion: client.clientAssertion })
    }
  }
}

/** A URL that names a metadata document in full: the OpenID Connect one, RFC 8414's, or another under /.well-known/. */
const WELL_KNOWN = /\/\.well-known\//

/**
 * The URL the discovery document is fetched from: AUTH_DISCOVERY_URL (a
 * document's own URL, OpenID Connect's or RFC 8414's, or a base under which
 * the OpenID Connect one is), else the issuer's. Undefined without
 * AUTH_ISSUER_URL, which names the issuer the document must hold wherever
 * it is fetched from.
 */
function discoveryUrlOf (issuerUrl: string | undefined, given: URL | undefined, issuerSet: boolean, problems: string[]): string | undefined {
  if (given !== undefined && !issuerSet) {
    problems.push('AUTH_DISCOVERY_URL is used only with AUTH_ISSUER_URL, the issuer its document must name (the public one, such as https://sso.example.com/realms/<realm>)')
    return undefined
  }
  if (given !== undefined) return WELL_KNOWN.test(given.pathname) ? given.href : wellKnownUrl(given.href)
  return issuerUrl === undefined ? undefined : wellKnownUrl(issuerUrl)
}

/** The OpenID Connect discovery document of an issuer (or of a base URL standing for it): appended to its path, any trailing slash removed first. */
export function wellKnownUrl (issuer: string): string {
  return `${issuer.replace(/\/+$/, '')}/.well-known/openid-configuration`
}

/**
 * An issuer's RFC 8414 authorization server metadata (section 3.1): the
 * well-known part inserted between the origin and the issuer's path, the
 * path's trailing slash removed (https://h/t1 has
 * https://h/.well-known/oauth-authorization-server/t1).
 */
export function metadataUrl (issuer: string): string {
  const url = new URL(issuer)
  const path = url.pathname.replace(/\/+$/, '')
  return `${url.origin}/.well-known/oauth-authorization-server${path}`
}
