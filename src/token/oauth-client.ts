import * as oauth from 'oauth4webapi'
import type { SecretValues } from '../config/credentials.js'
import type { PrimaryGrant } from '../config/load.js'
import type { Logger } from '../logger.js'
import type { GrantTrace } from '../tracing/tracing.js'
import type { SecretScrubber } from '../secrets.js'
import type { ClientAuthenticator } from './client-auth.js'
import type { Clock } from './clock.js'
import { wellKnownUrl } from '../config/auth.js'
import { inTheirNames } from '../config/names.js'
import { AuthRequests, type AuthTls } from './auth-requests.js'
import { AuthServerDpop } from './auth-server-dpop.js'
import { fetchDiscovery, issuerOf, type Endpoints } from './discovery.js'
import type { DpopKey } from './dpop.js'
import { ACCESS_TOKEN_TYPE, answerOf, checkTokenAnswer, GrantError, grantFields, TOKEN_EXCHANGE, USABLE_ISSUED_TYPES, type Answer, type Fields, type GrantExtras, type TokenSet } from './grant.js'
import { presentedCertificate, type AuthFetch } from './http.js'
import { advised } from './advice.js'

export interface OAuthClientOptions {
  /** undefined: the token endpoint comes from discovery (issuerUrl) */
  tokenUrl?: string
  /** AUTH_ISSUER_URL: discovery runs before the first grant, and the document must name this issuer */
  issuerUrl?: string
  /** where the discovery document is fetched (AUTH_DISCOVERY_URL, else the issuer's well-known URL) */
  discoveryUrl?: string
  /** Keycloak's other layout of the same URL, tried once should tokenUrl not be a token endpoint */
  alternateTokenUrl?: string
  /** the grant that obtains a token from the credentials */
  grantType: PrimaryGrant
  clientId: string
  /** the client's part of every request */
  client: ClientAuthenticator
  /** AUTH_SCOPE and AUTH_TOKEN_PARAMS, for every grant */
  extras: GrantExtras
  credentials: { read(): Promise<SecretValues> }
  fetch: AuthFetch
  /** AUTH_TLS_*: why the client certificate cannot be presented now, if it cannot; whether one is presented; the server's refusal of it just now */
  tls?: AuthTls
  /** longest wait for one request */
  timeoutMs: number
  /** DPoP mode: every request carries a proof with this key, and tokens must be bound to it */
  dpop?: DpopKey
  /** AUTH_DPOP_ALG was set: a server that does not offer its algorithm is a configuration error; unset, a key of one it offers replaces `dpop` */
  dpopAlgSet?: boolean
  clock: Clock
  log: Logger
  secrets: SecretScrubber
  /** a named route's own AUTH_* variables, named so in its warnings (CredentialConfig.setBy) */
  setBy?: Readonly<Record<string, string>>
}

/**
 * The auth server as the token lifecycle sees it, on oauth4webapi:
 * discovery once, then grants sent to the token endpoint with the
 * credentials as they are at that moment, each bounded by TOKEN_TIMEOUT_MS,
 * each answer checked; the session ended at Keycloak's end-session endpoint
 * or by revocation. It decides nothing about when to send; every failure is
 * a GrantError. Each request is bounded by auth-requests.ts, and the DPoP
 * key and nonce it proves them with are auth-server-dpop.ts's.
 */
export class OAuthClient {
  readonly #o: OAuthClientOptions
  readonly #client: oauth.Client
  readonly #fetch: AuthFetch
  /** the DPoP key (the one given, or one of an algorithm the server offers), its handle and the server's nonce */
  readonly #dpop: AuthServerDpop
  readonly #requests: AuthRequests
  /** undefined until discovery has named it */
  #tokenUrl: string | undefined
  /** what discovery found; undefined until it has run (or without AUTH_ISSUER_URL) */
  #endpoints: Endpoints | undefined
  /** the other Keycloak layout, until it has been tried */
  #alternateTokenUrl: string | undefined

  constructor (options: OAuthClientOptions) {
    this.#o = options
    this.#client = { client_id: options.clientId }
    this.#fetch = options.fetch
    this.#dpop = new AuthServerDpop(options.dpop)
    this.#requests = new AuthRequests(options.clock, options.tls)
    this.#tokenUrl = options.tokenUrl
    this.#alternateTokenUrl = options.alternateTokenUrl
  }

  get grantType (): PrimaryGrant {
    return this.#o.grantType
  }

  get tokenUrl (): string | undefined {
    return this.#tokenUrl
  }

  get issuerUrl (): string | undefined {
    return this.#o.issuerUrl
  }

  /** Where the discovery document is fetched; undefined without an issuer. */
  get discoveryUrl (): string | undefined {
    return this.#o.issuerUrl === undefined ? undefined : this.#o.discoveryUrl ?? wellKnownUrl(this.#o.issuerUrl)
  }

  get endpoints (): Endpoints | undefined {
    return this.#endpoints
  }

  get needsDiscovery (): boolean {
    return this.#o.issuerUrl !== undefined && this.#endpoints === undefined
  }

  /** The scheme of the Authorization header the tokens go in. */
  get scheme (): 'DPoP' | 'Bearer' {
    return this.#dpop.key === undefined ? 'Bearer' : 'DPoP'
  }

  /** The DPoP key, in DPoP mode. */
  get dpop (): DpopKey | undefined {
    return this.#dpop.key
  }

  /** Aborts the request in flight; nothing more is sent but the session ending. */
  stop (): void {
    this.#requests.stop()
  }

  /**
   * OpenID Connect discovery (AUTH_ISSUER_URL), once for the process's life:
   * the token endpoint (unless AUTH_TOKEN_URL is set) and the end-session
   * and revocation endpoints. Undefined without an issuer.
   */
  async discover (): Promise<Endpoints | undefined> {
    const issuer = this.#o.issuerUrl
    const url = this.discoveryUrl
    if (issuer === undefined || url === undefined) return undefined
    if (this.#endpoints !== undefined) return this.#endpoints
    const shorten = this.#shorten
    const endpoints = await fetchDiscovery({
      issuer,
      url,
      get: async (from) => await this.#requests.send('discovery', this.#o.timeoutMs, async (signal) => await this.#fetch(from, { method: 'GET', headers: { accept: 'application/json' }, signal })),
      configuredTokenUrl: this.#tokenUrl,
      shorten,
      presentsCertificate: this.#o.tls?.presents === true,
      log: this.#o.log
    })
    await this.#offered(endpoints)
    this.#endpoints = endpoints
    this.#tokenUrl ??= endpoints.tokenUrl
    for (const ignored of endpoints.ignored) this.#o.log.warn({ event: 'discovery' }, this.#named(shorten(ignored, 500)))
    this.#o.log.info({
      event: 'discovery',
      issuer,
      ...(endpoints.url !== wellKnownUrl(issuer) && { discoveryUrl: endpoints.url }),
      tokenUrl: this.#tokenUrl,
      endSessionUrl: endpoints.endSessionUrl ?? null,
      revocationUrl: endpoints.revocationUrl ?? null,
      ...(endpoints.mtls === true && { mtlsEndpointAliases: true })
    }, 'discovered the realm\'s endpoints')
    return endpoints
  }

  /**
   * What the server says it supports, against what is configured: a DPoP
   * algorithm it does not offer is a configuration error when AUTH_DPOP_ALG
   * names it, and otherwise gives way to a key of one it offers (ES256
   * first); a client authentication method it does not list is warned about
   * (the list may be incomplete, so the grant is still tried).
   */
  async #offered (endpoints: Endpoints): Promise<void> {
    const method = this.#o.client.mode
    const methods = endpoints.authMethods
    if (methods !== undefined && !methods.includes(method)) {
      endpoints.ignored.push(`AUTH_CLIENT_AUTH=${method} is not among the client authentication methods the auth server lists (token_endpoint_auth_methods_supported: ${this.#shorten(methods.join(', '), 300)}): the token endpoint may refuse the client`)
    }
    const replaced = await this.#dpop.offered(endpoints.dpopAlgs, this.#o.dpopAlgSet === true, this.#shorten)
    if (replaced !== undefined) this.#o.log.info({ event: 'discovery', dpopAlg: replaced.chosen }, this.#named(`the auth server does not offer ${replaced.was} for DPoP proofs: using a new ${replaced.chosen} key (AUTH_DPOP_ALG selects one)`))
  }

  /**
   * The configured grant (password or client_credentials), with the
   * credentials as they are now. `trace`: the grant's, whose span its
   * request is a child of.
   */
  async primaryGrant (trace: GrantTrace): Promise<TokenSet> {
    if (this.grantType === 'client_credentials') return await this.#send('client_credentials', () => [], this.#o.extras, trace)
    return await this.#send('password', (creds) => {
      this.#o.secrets.add(creds.password)
      return [['username', creds.username ?? ''], ['password', creds.password ?? '']]
    }, this.#o.extras, trace)
  }

  /** The refresh grant. */
  async refreshGrant (refreshToken: string, trace: GrantTrace): Promise<TokenSet> {
    return await this.#send('refresh_token', () => [['refresh_token', refreshToken]], this.#o.extras, trace)
  }

  /**
   * Token exchange (RFC 8693) of `subjectToken`, an access token of this
   * client's, for one for `audience`: its own fields and the client's
   * authentication only (AUTH_SCOPE and AUTH_TOKEN_PARAMS are the grants').
   */
  async exchange (subjectToken: string, audience: string, scope: string | undefined, trace: GrantTrace): Promise<TokenSet> {
    const set = await this.#send(TOKEN_EXCHANGE, () => [
      ['subject_token', subjectToken],
      ['subject_token_type', ACCESS_TOKEN_TYPE],
      ['requested_token_type', ACCESS_TOKEN_TYPE],
      ['audience', audience],
      ...(scope === undefined ? [] : [['scope', scope] as [string, string]])
    ], {}, trace)
    // what was issued is checked (RFC 8693 §2.2.1): a refresh or ID token is never sent as an access token
    const issued = set.issuedTokenType
    if (issued !== undefined && !USABLE_ISSUED_TYPES.has(issued)) {
      throw new GrantError(`token exchange answered with issued_token_type ${JSON.stringify(this.#shorten(issued, 100))}, not an access token: the server did not issue what was asked for`, 'unusable', { status: 200 })
    }
    return set
  }

  /** The client's key as its assertions name it (private_key_jwt), for `check`. */
  async clientKey (): Promise<{ alg: string, kid: string } | undefined> {
    return await this.#o.client.keyDescription(await this.#o.credentials.read())
  }

  /** One grant, its fields made from the credentials as they are now. */
  async #send (grant: string, own: (creds: SecretValues) => Fields, extras: GrantExtras, trace: GrantTrace): Promise<TokenSet> {
    const creds = await this.#o.credentials.read()
    this.#o.secrets.add(creds.clientSecret)
    const fields = grantFields(grant, own(creds), extras)
    try {
      return await this.#post(grant, this.#tokenUrl ?? '', fields, creds, trace)
    } catch (err) {
      const alternate = this.#alternateTokenUrl
      if (!(err instanceof GrantError) || err.kind !== 'wrong_url' || alternate === undefined || this.#requests.stopped) throw err
      // Keycloak 17+ serves without /auth, older ones with it: the URL was
      // derived from AUTH_URL, so the other layout is tried, once.
      this.#alternateTokenUrl = undefined
      const set = await this.#post(grant, alternate, fields, creds, trace).catch((again: unknown) => {
        // only a token endpoint judges a grant: 400 or 401 with an OAuth error
        const judged = again instanceof GrantError && again.kind === 'rejected' && (again.status === 400 || again.status === 401) && again.oauthError !== undefined
        if (!judged) throw err
        this.#useAlternate(alternate)
        throw again
      })
      this.#useAlternate(alternate)
      return set
    }
  }

  #useAlternate (url: string): void {
    const configured = this.#tokenUrl
    this.#tokenUrl = url
    this.#o.log.warn({ event: 'token', tokenUrl: url, derivedTokenUrl: configured },
      this.#named(`the token endpoint answers at ${url}, not at ${configured}: using it. Set AUTH_TOKEN_URL=${url} to skip the first try`))
  }

  /**
   * One grant sent to the token endpoint at `url`, its answer checked. In
   * DPoP mode a `use_dpop_nonce` answer is followed by one more try, the
   * proof then carrying the nonce the server sent (oauth4webapi's DPoP
   * handle keeps it); never a loop.
   */
  async #post (grant: string, url: string, fields: Fields, creds: SecretValues, trace: GrantTrace): Promise<TokenSet> {
    const as = this.#metadata(url)
    for (let attempt = 0; ; attempt++) {
      const auth = await this.#o.client.forRequest(creds, url)
      this.#o.log.debug({ event: 'token', grant, tokenUrl: url }, 'token request')
      const res = await this.#requests.send('token', this.#o.timeoutMs, async (signal) =>
        await oauth.genericTokenEndpointRequest(as, this.#client, auth, grant, fields, { ...this.#options(url, signal, trace), ...(this.#dpop.handle !== undefined && { DPoP: this.#dpop.handle }) }))
      this.#dpop.noteNonce(res.headers.get('dpop-nonce'))
      this.#o.log.debug({ event: 'token', grant, status: res.status }, 'token endpoint answered')
      let set: TokenSet
      try {
        set = await checkTokenAnswer(res, async (answer) => await oauth.processGenericTokenEndpointResponse(as, this.#client, answer), this.#shorten)
      } catch (err) {
        if (attempt === 0 && this.#dpop.handle !== undefined && err instanceof GrantError && err.oauthError === 'use_dpop_nonce') {
          this.#o.log.debug({ event: 'token', purpose: 'token' }, 'the auth server asked for a DPoP nonce: sending again with it')
          continue
        }
        if (err instanceof GrantError && err.kind === 'wrong_url') throw new GrantError(`POST ${url}: ${err.message}`, 'wrong_url', { ...(err.status !== undefined && { status: err.status }) })
        if (err instanceof GrantError) throw advised(err, { grant, clientAuth: this.#o.client.mode, scope: this.#o.extras.scope })
        throw err
      }
      // a token the server did not bind to the key is not used, not even as a bearer token
      if (this.#dpop.key !== undefined && set.tokenType.toLowerCase() !== 'dpop') {
        throw new GrantError(`the token endpoint answered with a ${set.tokenType} token, not a DPoP-bound one: turn on "Require DPoP bound tokens" for the client in Keycloak 26.4 or later (Advanced, Proof of Possession), or set AUTH_DPOP=false`, 'unusable', { status: 200 })
      }
      if (this.#dpop.key === undefined && set.tokenType.toLowerCase() === 'dpop') {
        throw new GrantError('the token endpoint answered with a DPoP-bound token, which only works with its proof: set AUTH_DPOP=true, or turn off "Require DPoP bound tokens" for the client', 'unusable', { status: 200 })
      }
      const certificate = presentedCertificate(res)
      return certificate === undefined ? set : { ...set, certificate }
    }
  }

  /** Keycloak's end-session endpoint, which oauth4webapi does not know: the refresh token, the client authenticated as for a grant. */
  async endSession (url: string, refreshToken: string, timeoutMs: number): Promise<Answer> {
    const auth = await this.#authentication(this.#tokenUrl ?? url)
    const send = async (): Promise<Answer> => {
      const body = new URLSearchParams([['refresh_token', refreshToken]])
      const headers = new Headers({ accept: 'application/json' })
      await auth(this.#metadata(this.#tokenUrl ?? url), this.#client, body, headers)
      headers.set('content-type', 'application/x-www-form-urlencoded;charset=UTF-8')
      const proof = this.#dpop.proof(url)
      if (proof !== undefined) headers.set('dpop', proof)
      const res = await this.#requests.send('logout', timeoutMs, async (signal) => await this.#fetch(url, { method: 'POST', headers: Object.fromEntries(headers), body: body.toString(), signal }))
      return await answerOf(res)
    }
    return await this.#dpop.provenOnce(send)
  }

  /** RFC 7009 revocation of one token at `url`. */
  async revoke (url: string, token: string, hint: 'refresh_token' | 'access_token', timeoutMs: number): Promise<Answer> {
    const auth = await this.#authentication(this.#tokenUrl ?? url)
    const as = { ...this.#metadata(this.#tokenUrl ?? url), revocation_endpoint: url }
    const send = async (): Promise<Answer> => {
      const proof = this.#dpop.proof(url)
      const res = await this.#requests.send('logout', timeoutMs, async (signal) => await oauth.revocationRequest(as, this.#client, auth, token, {
        ...this.#options(url, signal),
        additionalParameters: { token_type_hint: hint },
        ...(proof !== undefined && { headers: { dpop: proof } })
      }))
      return await answerOf(res)
    }
    return await this.#dpop.provenOnce(send)
  }

  /**
   * The client's authentication for a request that is not a grant (the
   * session's end), with the credentials as they are now; what is secret in
   * it is known to the scrubber before anything is sent (a server that
   * echoes the form or the header echoes it).
   */
  async #authentication (audience: string): Promise<oauth.ClientAuth> {
    const creds = await this.#o.credentials.read()
    this.#o.secrets.add(creds.clientSecret)
    return await this.#o.client.forRequest(creds, audience)
  }

  /** The authorization server as oauth4webapi takes it. */
  #metadata (tokenUrl: string): oauth.AuthorizationServer {
    return { issuer: this.#endpoints?.issuer ?? issuerOf(tokenUrl), token_endpoint: tokenUrl }
  }

  /**
   * What every request to `url` takes: the timeout's signal, the sidecar's
   * HTTP client (traced within a grant's `trace`), http allowed where configured.
   */
  #options (url: string, signal: AbortSignal, trace?: GrantTrace): { signal: AbortSignal, [oauth.customFetch]: AuthFetch, [oauth.allowInsecureRequests]?: boolean } {
    return {
      signal,
      [oauth.customFetch]: trace === undefined ? this.#fetch : trace.traced(this.#fetch),
      // the operator chose an http URL (a Keycloak in the same pod, say): oauth4webapi refuses it otherwise
      ...(new URL(url).protocol === 'http:' && { [oauth.allowInsecureRequests]: true })
    }
  }

  readonly #shorten = (text: string, max: number): string => this.#o.secrets.shorten(text, max)
  readonly #named = (text: string): string => inTheirNames(text, this.#o.setBy)
}
