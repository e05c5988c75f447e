import { createHash, createSign, createVerify, randomBytes, randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { createServer as createTlsServer } from 'node:https'
import type { AddressInfo } from 'node:net'
import type { TLSSocket } from 'node:tls'
import { DpopVerifier } from './dpop-proof.js'
import { clientAuthOf, json, KC, kcError, readForm, signingKey, writeFault, type Fault, type GrantRecord, type LogoutRecord, type TokenServerOptions } from './token-server-parts.js'

export type { Fault, GrantRecord, LogoutRecord, TokenServerOptions } from './token-server-parts.js'

interface Session { id: string, client: string, user: string, active: boolean, started: number }
interface RefreshState { session: Session, expiresAt: number | undefined, used: boolean, jkt: string | undefined, x5t: string | undefined }

/** What a token request proved besides its client: a DPoP key, a TLS client certificate. */
interface Binding {
  jkt?: string | undefined
  /** the certificate's x5t#S256 and CN */
  x5t?: string | undefined
  subject?: string | undefined
}

/**
 * A development token server that answers the way Keycloak does: the same
 * token path, the same success fields, the same error bodies and statuses,
 * refresh-token rotation, offline tokens (`refresh_expires_in: 0`) and SSO
 * session limits, DPoP-bound tokens (with nonces, if asked). `npm run demo`
 * runs on it; the tests drive it and inject faults. Client assertions are
 * accepted unverified (the tests check them).
 * Never a production component.
 */
export class TokenServer {
  readonly server: Server
  readonly realm: string
  readonly tokenPath: string
  readonly grants: GrantRecord[] = []
  readonly logouts: LogoutRecord[] = []
  /** discovery documents served */
  discoveries = 0
  serviceAccounts: boolean
  clientCredentialsRefresh: boolean
  readonly publicUrl: string | undefined
  readonly faults: Fault[] = []
  /** a fault for every token request whose form it names (after the queued `faults`) */
  faultFor: ((form: Record<string, string>) => Fault | undefined) | undefined
  accessTokenSeconds: number
  refreshTokenSeconds: number
  sessionMaxSeconds: number
  rotation: boolean
  readonly clients: Record<string, string | undefined>
  readonly users: Record<string, string>
  /** DPoP: whether a proof is required, and the proofs' checker (its nonce, when nonces are on) */
  dpopRequired: boolean
  readonly dpop: DpopVerifier
  /** client id → the audiences its tokens may be exchanged for */
  exchange: Record<string, string[]>
  /** RFC 8705: tokens bound to the request's client certificate */
  mtlsBound: boolean
  /** discovery publishes mtls_endpoint_aliases */
  mtlsAliases: boolean
  /** tls_client_auth: client id → its certificate's CN */
  tlsClients: Record<string, string>
  /** most token requests ever seen in flight at once */
  maxConcurrent = 0
  #concurrent = 0
  readonly #key = signingKey()
  readonly #refresh = new Map<string, RefreshState>()
  readonly #sessions = new Map<string, Session>()
  readonly #revoked = new Set<string>()
  readonly #hanging = new Set<ServerResponse>()
  readonly #scheme: 'http' | 'https'

  constructor (options: TokenServerOptions = {}) {
    this.realm = options.realm ?? 'service-realm'
    this.tokenPath = options.tokenPath ?? `/auth/realms/${this.realm}/protocol/openid-connect/token`
    this.clients = options.clients ?? { 'legacy-app': undefined }
    this.users = options.users ?? { 'service-user': 'service-password' }
    this.accessTokenSeconds = options.accessTokenSeconds ?? 300
    this.refreshTokenSeconds = options.refreshTokenSeconds ?? 1800
    this.sessionMaxSeconds = options.sessionMaxSeconds ?? 0
    this.rotation = options.rotation ?? true
    this.publicUrl = options.publicUrl?.replace(/\/+$/, '')
    this.serviceAccounts = options.serviceAccounts ?? true
    this.clientCredentialsRefresh = options.clientCredentialsRefresh ?? false
    this.dpopRequired = options.dpop?.required ?? false
    this.dpop = new DpopVerifier({ nonce: options.dpop?.nonce ?? false })
    this.exchange = options.exchange ?? {}
    this.#scheme = options.tls === undefined ? 'http' : 'https'
    this.mtlsBound = options.mtls?.bound ?? false
    this.mtlsAliases = options.mtls?.aliases ?? false
    this.tlsClients = options.tlsClients ?? {}
    const tls = options.tls === undefined ? undefined : { ...options.tls, ...(options.tls.ca !== undefined && { requestCert: true, rejectUnauthorized: false }) }
    this.server = tls === undefined
      ? createServer((req, res) => this.#handle(req, res))
      : createTlsServer(tls, (req, res) => this.#handle(req, res))
  }

  async listen (port = 0, host = '127.0.0.1'): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(port, host, resolve))
    return this.url
  }

  /** Base URL, for AUTH_URL. */
  get url (): string {
    const { port } = this.server.address() as AddressInfo
    return `${this.#scheme}://127.0.0.1:${port}`
  }

  /** Full token endpoint URL, for AUTH_TOKEN_URL. */
  get tokenUrl (): string {
    return this.url + this.tokenPath
  }

  async close (): Promise<void> {
    for (const res of this.#hanging) res.destroy()
    this.server.closeAllConnections()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }

  /** The realm's issuer, as Keycloak names it: the token path without /protocol/openid-connect/token. */
  get issuer (): string {
    return (this.publicUrl ?? this.url) + this.#realmPath
  }

  /** The token endpoint's mTLS alias (RFC 8705 §5), a path of its own here so that its use shows. */
  get #mtlsTokenPath (): string {
    return this.tokenPath.replace(/\/token$/, '/mtls/token')
  }

  get #realmPath (): string {
    return this.tokenPath.replace(/\/protocol\/openid-connect\/token$/, '')
  }

  /** SSO sessions still active (not ended by logout, an admin or a limit). */
  activeSessions (): number {
    return [...this.#sessions.values()].filter((s) => s.active && this.#sessionLeftMs(s) > 0).length
  }

  /** Ends every SSO session, as an admin or the session limit would. */
  endSessions (): void {
    for (const s of this.#sessions.values()) s.active = false
  }

  /** Revokes one access token (as if its session was killed). */
  revoke (accessToken: string): void {
    this.#revoked.add(accessToken)
  }

  /**
   * Checks an `Authorization` header: who it names (and the key a DPoP-bound
   * token is bound to), or why it is refused. A bound token is refused as a
   * bearer token; its proof is the resource server's to check.
   */
  verify (header: string | undefined, certificate?: string): { ok: true, user: string, client: string, audience: string, expiresIn: number, jkt?: string, x5t?: string } | { ok: false, reason: string } {
    const scheme = /^(Bearer|DPoP) /i.exec(header ?? '')?.[1]?.toLowerCase()
    if (header === undefined || scheme === undefined) return { ok: false, reason: 'no bearer token' }
    const token = header.slice(scheme.length + 1)
    const [h, p, sig] = token.split('.')
    if (h === undefined || p === undefined || sig === undefined) return { ok: false, reason: 'malformed token' }
    const valid = createVerify('RSA-SHA256').update(`${h}.${p}`).verify(this.#key.publicKey, Buffer.from(sig, 'base64url'))
    if (!valid) return { ok: false, reason: 'bad signature' }
    if (this.#revoked.has(token)) return { ok: false, reason: 'revoked' }
    const claims = JSON.parse(Buffer.from(p, 'base64url').toString()) as { exp: number, preferred_username: string, azp: string, aud: string, cnf?: { jkt?: string, 'x5t#S256'?: string } }
    const now = Date.now() / 1000
    if (claims.exp <= now) return { ok: false, reason: 'expired' }
    if ((claims.cnf?.jkt !== undefined) !== (scheme === 'dpop')) return { ok: false, reason: claims.cnf?.jkt === undefined ? 'a bearer token sent as DPoP' : 'a DPoP-bound token sent as bearer' }
    const x5t = claims.cnf?.['x5t#S256']
    if (x5t !== undefined && x5t !== certificate) return { ok: false, reason: certificate === undefined ? 'a certificate-bound token without a client certificate' : 'a certificate-bound token with another client certificate' }
    return { ok: true, user: claims.preferred_username, client: claims.azp, audience: claims.aud, expiresIn: claims.exp - now, ...(claims.cnf?.jkt !== undefined && { jkt: claims.cnf.jkt }), ...(x5t !== undefined && { x5t }) }
  }

  #handle (req: IncomingMessage, res: ServerResponse): void {
    if (req.method === 'GET' && req.url === this.tokenPath.replace(/\/token$/, '/certs')) {
      return json(res, 200, { keys: [{ ...this.#key.jwk, kid: this.#key.kid, use: 'sig', alg: 'RS256' }] })
    }
    if (req.method === 'GET' && req.url === `${this.#realmPath}/.well-known/openid-configuration`) {
      this.discoveries += 1
      const fault = this.faults.shift()
      if (fault !== undefined && 'status' in fault) return writeFault(res, fault)
      const base = this.issuer + '/protocol/openid-connect'
      return json(res, 200, {
        issuer: this.issuer,
        authorization_endpoint: `${base}/auth`,
        token_endpoint: (this.publicUrl ?? this.url) + this.tokenPath,
        end_session_endpoint: `${base}/logout`,
        revocation_endpoint: `${base}/revoke`,
        jwks_uri: `${base}/certs`,
        grant_types_supported: ['authorization_code', 'implicit', 'refresh_token', 'password', 'client_credentials'],
        token_endpoint_auth_methods_supported: ['private_key_jwt', 'client_secret_basic', 'client_secret_post', 'tls_client_auth', 'client_secret_jwt'],
        ...(this.mtlsAliases && { mtls_endpoint_aliases: { token_endpoint: (this.publicUrl ?? this.url) + this.#mtlsTokenPath, revocation_endpoint: `${base}/revoke`, end_session_endpoint: `${base}/logout` } })
      })
    }
    const logoutPath = this.tokenPath.replace(/\/token$/, '/logout')
    const revokePath = this.tokenPath.replace(/\/token$/, '/revoke')
    if (req.method === 'POST' && (req.url === logoutPath || req.url === revokePath)) {
      readForm(req, (params) => {
        const form = Object.fromEntries(params)
        const endpoint = req.url === logoutPath ? 'logout' : 'revoke'
        const fault = this.faults.shift()
        if (fault !== undefined && 'hang' in fault) {
          this.#hanging.add(res)
          return
        }
        if (fault !== undefined && 'status' in fault) {
          this.logouts.push({ endpoint, form, clientAuth: clientAuthOf(form, req.headers.authorization), status: fault.status })
          return writeFault(res, fault)
        }
        this.#proven(req, req.url ?? '').then((proof) => {
          const presented = presentedCertificate(req)
          const { status, body } = !('jkt' in proof) ? proof : endpoint === 'logout' ? this.#logout(form, req.headers.authorization, presented) : this.#revoke(form, req.headers.authorization, presented)
          this.logouts.push({ endpoint, form, clientAuth: clientAuthOf(form, req.headers.authorization), status, ...('jkt' in proof && proof.jkt !== undefined && { jkt: proof.jkt }) })
          if (body === undefined) {
            res.writeHead(status)
            return void res.end()
          }
          json(res, status, body)
        }, (err: unknown) => { res.destroy(err as Error) })
      })
      return
    }
    if (req.method !== 'POST' || (req.url !== this.tokenPath && !(this.mtlsAliases && req.url === this.#mtlsTokenPath))) {
      return json(res, 404, { error: 'Unable to find matching target resource method' })
    }
    this.#concurrent += 1
    this.maxConcurrent = Math.max(this.maxConcurrent, this.#concurrent)
    res.on('close', () => { this.#concurrent -= 1 })
    readForm(req, (params) => {
      const form = Object.fromEntries(params)
      const authorization = req.headers.authorization
      const fault = this.faults.shift() ?? this.faultFor?.(form)
      const presented = presentedCertificate(req)
      const record = (status: number, jkt?: string): void => {
        this.grants.push({
          grantType: form.grant_type ?? '', form, params, clientAuth: clientAuthOf(form, authorization), at: Date.now(), status, path: req.url ?? '',
          ...(jkt !== undefined && { jkt }),
          ...(presented !== undefined && { certificate: presented.x5t }),
          ...(typeof req.headers.traceparent === 'string' && { traceparent: req.headers.traceparent })
        })
      }
      const answer = (): void => {
        this.#proven(req, req.url ?? this.tokenPath).then((proof) => {
          const { status, body } = 'jkt' in proof ? this.#grant(form, authorization, { jkt: proof.jkt, ...presented }) : proof
          record(status, 'jkt' in proof ? proof.jkt : undefined)
          if (!res.destroyed) json(res, status, body, this.dpop.nonce === undefined ? {} : { 'dpop-nonce': this.dpop.nonce })
        }, (err: unknown) => { res.destroy(err as Error) })
      }
      if (fault === undefined) return answer()
      if ('hang' in fault) {
        record(0)
        this.#hanging.add(res)
        return
      }
      if ('reset' in fault) {
        record(0)
        req.socket.destroy()
        return
      }
      if ('delayMs' in fault) {
        setTimeout(answer, fault.delayMs)
        return
      }
      record(fault.status)
      writeFault(res, fault)
    })
  }

  /**
   * The key a request's DPoP proof names (undefined: no proof, and none
   * required), or the refusal, as Keycloak words it.
   */
  async #proven (req: IncomingMessage, path: string): Promise<{ jkt: string | undefined } | { status: number, body: object }> {
    if (req.headers.dpop === undefined) return this.dpopRequired ? kcError(KC.noProof) : { jkt: undefined }
    const verdict = await this.dpop.verify(req.headers.dpop, { method: req.method ?? '', url: (this.publicUrl ?? this.url) + path })
    if (verdict.ok) return { jkt: verdict.jkt }
    // Keycloak names every other fault of a proof invalid_request
    return { status: 400, body: { error: verdict.error === 'use_dpop_nonce' ? verdict.error : 'invalid_request', error_description: verdict.description } }
  }

  /** The client a request authenticates as (form fields or client_secret_basic), or Keycloak's refusal. */
  #client (form: Record<string, string>, authorization: string | undefined, bound: Binding = {}): { clientId: string } | { status: number, body: object } {
    let clientId = form.client_id
    let given = form.client_secret
    if (authorization !== undefined) {
      const basic = /^Basic ([A-Za-z0-9+/=]+)$/i.exec(authorization)
      const decoded = basic === null ? '' : Buffer.from(basic[1]!, 'base64').toString('utf8')
      const colon = decoded.indexOf(':')
      if (colon === -1) return kcError(KC.unknownClient)
      const formDecode = (v: string): string => new URLSearchParams(`v=${v}`).get('v') ?? ''
      clientId = formDecode(decoded.slice(0, colon))
      given = formDecode(decoded.slice(colon + 1))
    }
    if (clientId === undefined || !(clientId in this.clients)) return kcError(KC.unknownClient)
    // A client assertion is taken as it is: the tests verify what was sent,
    // and the real-Keycloak tests have Keycloak verify it.
    if (form.client_assertion !== undefined) {
      return form.client_assertion_type === 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer' && form.client_secret === undefined ? { clientId } : kcError(KC.unknownClient)
    }
    // tls_client_auth: the certificate, signed by the CA, with the client's CN, and nothing else
    const subject = this.tlsClients[clientId]
    if (subject !== undefined) return given === undefined && bound.subject === subject ? { clientId } : kcError(KC.unknownClient)
    const secret = this.clients[clientId]
    if (secret !== undefined && given !== secret) return kcError(KC.badClientSecret)
    return { clientId }
  }

  #grant (form: Record<string, string>, authorization: string | undefined, bound: Binding): { status: number, body: object } {
    const { jkt } = bound
    const client = this.#client(form, authorization, bound)
    if (!('clientId' in client)) return client
    const { clientId } = client

    if (form.grant_type === 'client_credentials') {
      if (this.clients[clientId] === undefined && this.tlsClients[clientId] === undefined) return kcError(KC.publicServiceAccount)
      if (!this.serviceAccounts) return kcError(KC.noServiceAccount)
      const session: Session = { id: randomUUID(), client: clientId, user: `service-account-${clientId}`, active: true, started: Date.now() }
      if (!this.clientCredentialsRefresh) return this.#issue(session, form.scope, bound, false)
      this.#sessions.set(session.id, session)
      return this.#issue(session, form.scope, bound)
    }

    if (form.grant_type === 'password') {
      const user = form.username ?? ''
      if (!(user in this.users) || this.users[user] !== form.password) return kcError(KC.badUser)
      const session: Session = { id: randomUUID(), client: clientId, user, active: true, started: Date.now() }
      this.#sessions.set(session.id, session)
      return this.#issue(session, form.scope, bound)
    }
    if (form.grant_type === 'refresh_token') {
      const state = this.#refresh.get(form.refresh_token ?? '')
      if (state === undefined) return kcError(KC.notActive)
      if (state.expiresAt !== undefined && state.expiresAt <= Date.now()) return kcError(KC.notActive)
      if (!state.session.active || this.#sessionLeftMs(state.session) <= 0) return kcError(KC.sessionGone)
      if (this.rotation && state.used) {
        state.session.active = false // reuse of a rotated token ends the session, as in Keycloak
        return kcError(KC.stale)
      }
      // a public client's refresh token is bound to its key (a confidential
      // client's is not): refreshed with a proof of that key only
      if (state.jkt !== undefined && state.jkt !== jkt) return jkt === undefined ? kcError(KC.noProof) : kcError(KC.otherKey)
      if (state.x5t !== undefined && state.x5t !== bound.x5t) return kcError(KC.otherCertificate)
      state.used = true
      return this.#issue(state.session, form.scope, bound)
    }
    if (form.grant_type === 'urn:ietf:params:oauth:grant-type:token-exchange') return this.#exchange(clientId, form, bound)
    if (form.grant_type === undefined) {
      return { status: 400, body: { error: 'invalid_request', error_description: 'Missing form parameter: grant_type' } }
    }
    return { status: 400, body: { error: 'unsupported_grant_type', error_description: 'Unsupported grant_type' } }
  }

  /**
   * Keycloak 26's standard token exchange: the client's own access token
   * (its `azp`) for one whose audience is `audience`, in the same session,
   * without a refresh token. An invalid subject is `invalid_request`, as
   * Keycloak words it.
   */
  #exchange (clientId: string, form: Record<string, string>, bound: Binding): { status: number, body: object } {
    const allowed = this.exchange[clientId]
    if (allowed === undefined) return kcError(KC.noExchange)
    const subject = this.verify(`${bound.jkt === undefined ? 'Bearer' : 'DPoP'} ${form.subject_token ?? ''}`, bound.x5t)
    if (!subject.ok || subject.client !== clientId || form.subject_token_type !== 'urn:ietf:params:oauth:token-type:access_token') return kcError(KC.badSubject)
    const audience = form.audience ?? ''
    if (!allowed.includes(audience)) return { status: 400, body: { error: KC.noAudience.error, error_description: `${KC.noAudience.description}: ${audience}` } }
    const session = [...this.#sessions.values()].find((s) => s.user === subject.user && s.client === clientId && s.active) ??
      { id: randomUUID(), client: clientId, user: subject.user, active: true, started: Date.now() }
    return this.#issue(session, form.scope, bound, false, audience)
  }

  /** Keycloak's end-session endpoint as a client calls it: the session of the refresh token ends (204). */
  #logout (form: Record<string, string>, authorization: string | undefined, bound: Binding = {}): { status: number, body?: object } {
    const client = this.#client(form, authorization, bound)
    if (!('clientId' in client)) return client
    const state = this.#refresh.get(form.refresh_token ?? '')
    if (state === undefined || (state.expiresAt !== undefined && state.expiresAt <= Date.now())) return kcError(KC.badRefresh)
    if (state.jkt !== undefined) return kcError(KC.boundLogout)
    // an ended session is ended again without complaint
    state.session.active = false
    return { status: 204 }
  }

  /** RFC 7009: 200 whether or not the token was known; a refresh token's session ends. */
  #revoke (form: Record<string, string>, authorization: string | undefined, bound: Binding = {}): { status: number, body?: object } {
    const client = this.#client(form, authorization, bound)
    if (!('clientId' in client)) return client
    const state = this.#refresh.get(form.token ?? '')
    if (state !== undefined) state.session.active = false
    else if (form.token !== undefined) this.#revoked.add(form.token)
    return { status: 200 }
  }

  #sessionLeftMs (session: Session): number {
    return this.sessionMaxSeconds === 0 ? Infinity : session.started + this.sessionMaxSeconds * 1000 - Date.now()
  }

  #issue (session: Session, scope: string | undefined, bound: Binding, withRefresh = true, audience = 'account'): { status: number, body: object } {
    const jkt = bound.jkt
    const x5t = this.mtlsBound ? bound.x5t : undefined
    const now = Math.floor(Date.now() / 1000)
    const offline = (scope ?? '').split(' ').includes('offline_access')
    const claims = {
      exp: now + this.accessTokenSeconds,
      iat: now,
      jti: randomUUID(),
      iss: this.issuer,
      aud: audience,
      scope: scope ?? 'profile email',
      sub: session.user,
      typ: 'Bearer',
      azp: session.client,
      sid: session.id,
      preferred_username: session.user,
      ...((jkt !== undefined || x5t !== undefined) && { cnf: { ...(jkt !== undefined && { jkt }), ...(x5t !== undefined && { 'x5t#S256': x5t }) } })
    }
    const accessToken = this.#sign(claims)
    // with the openid scope, Keycloak adds an ID token, issued by the public hostname like every token
    const idToken = (scope ?? '').split(' ').includes('openid')
      ? { id_token: this.#sign({ exp: claims.exp, iat: now, jti: randomUUID(), iss: this.issuer, aud: session.client, sub: session.user, typ: 'ID', azp: session.client, sid: session.id }) }
      : {}
    if (!withRefresh) {
      // Keycloak's client_credentials answer: no refresh token, no session
      return {
        status: 200,
        body: { access_token: accessToken, expires_in: this.accessTokenSeconds, refresh_expires_in: 0, token_type: jkt === undefined ? 'Bearer' : 'DPoP', ...idToken, 'not-before-policy': 0, scope: scope ?? 'profile email' }
      }
    }
    const refreshToken = randomBytes(24).toString('base64url')
    // Like Keycloak: a refresh token lives the idle timeout, cut to what is left of the session.
    const refreshSeconds = offline
      ? 0
      : Math.max(1, Math.min(this.refreshTokenSeconds, Math.floor(this.#sessionLeftMs(session) / 1000)))
    this.#refresh.set(refreshToken, {
      session,
      expiresAt: refreshSeconds === 0 ? undefined : Date.now() + refreshSeconds * 1000,
      used: false,
      jkt: this.clients[session.client] === undefined ? jkt : undefined,
      x5t
    })
    return {
      status: 200,
      body: {
        access_token: accessToken,
        expires_in: this.accessTokenSeconds,
        refresh_expires_in: refreshSeconds,
        refresh_token: refreshToken,
        token_type: jkt === undefined ? 'Bearer' : 'DPoP',
        ...idToken,
        'not-before-policy': 0,
        session_state: session.id,
        scope: scope ?? 'profile email'
      }
    }
  }

  /** A JWT signed with the realm's key (RS256), as Keycloak issues them. */
  #sign (claims: object): string {
    const head = Buffer.from(JSON.stringify({ alg: 'RS256', typ: 'JWT', kid: this.#key.kid })).toString('base64url')
    const payload = Buffer.from(JSON.stringify(claims)).toString('base64url')
    return `${head}.${payload}.${createSign('RSA-SHA256').update(`${head}.${payload}`).sign(this.#key.privateKey, 'base64url')}`
  }
}

/** The client certificate a request came with, when the server's CA signed it: its x5t#S256 and CN. */
export function presentedCertificate (req: IncomingMessage): { x5t: string, subject: string } | undefined {
  const socket = req.socket as TLSSocket
  if (socket.encrypted !== true || !socket.authorized) return undefined
  const cert = socket.getPeerCertificate()
  if (cert.raw === undefined) return undefined
  return { x5t: createHash('sha256').update(cert.raw).digest('base64url'), subject: String(cert.subject?.CN ?? '') }
}
