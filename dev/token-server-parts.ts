import { generateKeyPairSync, randomBytes, type KeyObject } from 'node:crypto'
import type { IncomingMessage, ServerResponse } from 'node:http'

// The development token server's options, what it answers with and how:
// Keycloak's own error bodies, the records the tests read, HTTP helpers.

export interface TokenServerOptions {
  realm?: string
  /** client id → secret (undefined: a public client) */
  clients?: Record<string, string | undefined>
  /** user name → password */
  users?: Record<string, string>
  /** access token lifetime, seconds */
  accessTokenSeconds?: number
  /** refresh token lifetime, seconds (Keycloak's SSO Session Idle) */
  refreshTokenSeconds?: number
  /** longest life of an SSO session, seconds (Keycloak's SSO Session Max); 0 for none */
  sessionMaxSeconds?: number
  /** a refresh token works once (Keycloak's "Revoke Refresh Token") */
  rotation?: boolean
  /** path of the token endpoint; Keycloak's (with the /auth prefix) by default */
  tokenPath?: string
  /** confidential clients may use client_credentials ("Service accounts roles" on); true by default */
  serviceAccounts?: boolean
  /** the URL clients reach it at, for `iss` and discovery (a compose service name, say); its listening address by default */
  publicUrl?: string
  /** client_credentials answers carry a refresh token (Keycloak's "Use refresh tokens for client credentials grant"); false by default */
  clientCredentialsRefresh?: boolean
  /**
   * Serve HTTPS with this key and certificate (PEM); with `ca`, a client
   * certificate is asked for and, when that CA signed it, taken (Keycloak's
   * `--https-client-auth=request`)
   */
  tls?: { key: string, cert: string, ca?: string }
  /**
   * RFC 8705: `bound` binds tokens (and refresh tokens) to the client
   * certificate of their request (`cnf.x5t#S256`); `aliases` publishes
   * mtls_endpoint_aliases in discovery, the token endpoint under /mtls/
   */
  mtls?: { bound?: boolean, aliases?: boolean }
  /** tls_client_auth: client id → the CN of the certificate it authenticates with */
  tlsClients?: Record<string, string>
  /**
   * DPoP (RFC 9449): a request with a valid proof gets a token bound to its
   * key; `required` refuses one without (Keycloak's "Require DPoP bound
   * tokens"), `nonce` demands the server's nonce in every proof.
   */
  dpop?: { required?: boolean, nonce?: boolean }
  /**
   * Standard token exchange (RFC 8693, Keycloak 26's): client id → the
   * audiences its tokens may be exchanged for; a client not named may not
   * exchange at all.
   */
  exchange?: Record<string, string[]>
}

export interface GrantRecord {
  grantType: string
  /** the form as sent; a repeated name (RFC 8707 resource) keeps its last value here, all of them in `params` */
  form: Record<string, string>
  params: Array<[string, string]>
  /** how the client authenticated: form fields, an Authorization header (client_secret_basic), or not at all */
  clientAuth: 'post' | 'basic' | 'jwt' | 'none'
  at: number
  status: number
  /** the thumbprint of the key a valid DPoP proof named */
  jkt?: string
  /** the x5t#S256 of the client certificate the request came with, when the CA signed it */
  certificate?: string
  /** the path it was sent to */
  path?: string
  /** the W3C traceparent it came with, when the client traces */
  traceparent?: string
}

/** A call to the end-session or revocation endpoint. */
export interface LogoutRecord {
  endpoint: 'logout' | 'revoke'
  form: Record<string, string>
  clientAuth: 'post' | 'basic' | 'jwt' | 'none'
  status: number
  /** the thumbprint of the key a valid DPoP proof named */
  jkt?: string
}

/** What the next token request (or discovery, end-session or revocation request) gets instead of a normal answer. */
export type Fault =
  | { status: number, body: string, contentType?: string, headers?: Record<string, string> }
  | { hang: true }
  | { reset: true }
  | { delayMs: number }

/** A login: `client` is who obtained it, whose refresh tokens are bound to a key only when it is public. */
/** Keycloak 26.7's answers, as the real server gives them (test/keycloak/ runs against it). */
export const KC = {
  badUser: { status: 400, error: 'invalid_grant', description: 'Invalid user credentials' },
  unknownClient: { status: 401, error: 'invalid_client', description: 'Invalid client or Invalid client credentials' },
  badClientSecret: { status: 401, error: 'unauthorized_client', description: 'Invalid client or Invalid client credentials' },
  notActive: { status: 400, error: 'invalid_grant', description: 'Token is not active' },
  sessionGone: { status: 400, error: 'invalid_grant', description: 'Session not active' },
  stale: { status: 400, error: 'invalid_grant', description: 'Maximum allowed refresh token reuse exceeded' },
  publicServiceAccount: { status: 401, error: 'unauthorized_client', description: 'Public client not allowed to retrieve service account' },
  noServiceAccount: { status: 401, error: 'unauthorized_client', description: 'Client not enabled to retrieve service account' },
  badRefresh: { status: 400, error: 'invalid_grant', description: 'Invalid refresh token' },
  noProof: { status: 400, error: 'invalid_request', description: 'DPoP proof is missing' },
  otherKey: { status: 400, error: 'invalid_dpop_proof', description: 'DPoP proof public key thumbprint does not match dpop_jkt' },
  // the end-session endpoint, given a DPoP-bound (a public client's) refresh
  // token: refused whatever proof comes with it; revocation ends the session
  boundLogout: { status: 400, error: 'invalid_grant', description: 'DPoP proof is missing' },
  // standard token exchange (Keycloak 26.x)
  badSubject: { status: 400, error: 'invalid_request', description: 'Invalid token' },
  // a certificate-bound refresh token with another certificate, or none
  otherCertificate: { status: 401, error: 'unauthorized_client', description: 'Client certificate missing, or its thumbprint and one in the refresh token did NOT match' },
  noExchange: { status: 400, error: 'invalid_request', description: 'Standard token exchange is not enabled for the requested client' },
  noAudience: { status: 400, error: 'invalid_request', description: 'Requested audience not available' }
}

export interface SigningKey { privateKey: KeyObject, publicKey: KeyObject, jwk: object, kid: string }
let sharedKey: SigningKey | undefined

/** One RS256 key per process: generating one per server would slow the tests. */
export function signingKey (): SigningKey {
  if (sharedKey === undefined) {
    const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 })
    sharedKey = { privateKey, publicKey, jwk: publicKey.export({ format: 'jwk' }), kid: randomBytes(8).toString('hex') }
  }
  return sharedKey
}

/** A request's urlencoded form, in order, once it has all arrived. */
export function readForm (req: IncomingMessage, then: (params: Array<[string, string]>) => void): void {
  const chunks: Buffer[] = []
  req.on('data', (c: Buffer) => chunks.push(c))
  req.on('end', () => then([...new URLSearchParams(Buffer.concat(chunks).toString())]))
}

/** A scripted answer in place of the real one. */
export function writeFault (res: ServerResponse, fault: { status: number, body: string, contentType?: string, headers?: Record<string, string> }): void {
  res.writeHead(fault.status, { 'content-type': fault.contentType ?? 'application/json', ...fault.headers })
  res.end(fault.body)
}

export function clientAuthOf (form: Record<string, string>, authorization: string | undefined): 'post' | 'basic' | 'jwt' | 'none' {
  return authorization !== undefined ? 'basic' : form.client_assertion !== undefined ? 'jwt' : form.client_secret !== undefined ? 'post' : 'none'
}

export function kcError (e: { status: number, error: string, description: string }): { status: number, body: object } {
  return { status: e.status, body: { error: e.error, error_description: e.description } }
}

export function json (res: ServerResponse, status: number, body: object, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers })
  res.end(text)
}
