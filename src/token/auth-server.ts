import type { Credentials } from '../config/credentials.js'
import type { PrimaryGrant } from '../config/load.js'
import type { Logger } from '../logger.js'
import type { SecretScrubber } from '../secrets.js'
import type { Clock } from './clock.js'
import { checkDiscovery, wellKnownUrl, type Endpoints } from './discovery.js'
import type { ClientAuthenticator } from './client-auth.js'
import { dpopNonceOf, htuOf, type DpopKey } from './dpop.js'
import {
  buildRequest, checkTokenResponse, clientCredentialsGrant, GrantError, oauthErrorOf, passwordGrant, refreshGrant,
  type Fields, type GetJson, type GrantExtras, type GrantType, type PostForm, type TokenEndpointResponse, type TokenSet
} from './grant.js'
import type { TokenEvents } from './source.js'

export interface AuthServerOptions extends TokenEvents {
  /** undefined: the token endpoint comes from discovery (issuerUrl) */
  tokenUrl?: string
  /** AUTH_ISSUER_URL: discovery runs before the first grant */
  issuerUrl?: string
  /** Keycloak's other layout of the same URL, tried once should tokenUrl not be a token endpoint */
  alternateTokenUrl?: string
  /** the grant that obtains a token from the credentials */
  grantType: PrimaryGrant
  /** the client's part of every request */
  client: ClientAuthenticator
  /** AUTH_SCOPE and AUTH_TOKEN_PARAMS, for every grant */
  extras: GrantExtras
  credentials: { read(): Credentials }
  post: PostForm
  /** for discovery; required with issuerUrl */
  get?: GetJson
  /** longest wait for one request */
  timeoutMs: number
  /** DPoP mode: every request carries a proof with this key, and tokens must be bound to it */
  dpop?: DpopKey
  clock: Clock
  log: Logger
  secrets: SecretScrubber
}

export type RequestPurpose = 'token' | 'discovery' | 'logout'

/**
 * The auth server as the token lifecycle sees it: discovery once, then
 * grants sent to the token endpoint with the credentials as they are at that
 * moment, each bounded by TOKEN_TIMEOUT_MS, each answer checked. It decides
 * nothing about when to send; every failure is a GrantError.
 */
export class AuthServer {
  readonly #o: AuthServerOptions
  /** undefined until discovery has named it */
  #tokenUrl: string | undefined
  /** what discovery found; undefined until it has run (or without AUTH_ISSUER_URL) */
  #endpoints: Endpoints | undefined
  /** the other Keycloak layout, until it has been tried */
  #alternateTokenUrl: string | undefined
  /** the grant or discovery request in flight, aborted by stop() */
  #abort: AbortController | undefined
  /** the auth server's newest DPoP nonce */
  #nonce: string | undefined
  #stopped = false

  constructor (options: AuthServerOptions) {
    this.#o = options
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

  get endpoints (): Endpoints | undefined {
    return this.#endpoints
  }

  get needsDiscovery (): boolean {
    return this.#o.issuerUrl !== undefined && this.#endpoints === undefined
  }

  /** Aborts the request in flight; nothing more is sent but the session ending. */
  stop (): void {
    this.#stopped = true
    this.#abort?.abort()
  }

  /**
   * OpenID Connect discovery (AUTH_ISSUER_URL), once for the process's life:
   * the token endpoint (unless AUTH_TOKEN_URL is set) and the end-session
   * and revocation endpoints. Undefined without an issuer.
   */
  async discover (): Promise<Endpoints | undefined> {
    const issuer = this.#o.issuerUrl
    if (issuer === undefined || this.#o.get === undefined) return undefined
    if (this.#endpoints !== undefined) return this.#endpoints
    const url = wellKnownUrl(issuer)
    this.#o.log.debug({ event: 'discovery', url }, 'discovery request')
    const res = await this.request('discovery', this.#o.timeoutMs, (signal) => this.#o.get!(url, signal))
    const endpoints = checkDiscovery(issuer, res, this.#tokenUrl === undefined)
    this.#endpoints = endpoints
    this.#tokenUrl ??= endpoints.tokenUrl
    this.#o.log.info({
      event: 'discovery',
      issuer,
      tokenUrl: this.#tokenUrl,
      endSessionUrl: endpoints.endSessionUrl ?? null,
      revocationUrl: endpoints.revocationUrl ?? null
    }, 'discovered the realm\'s endpoints')
    return endpoints
  }

  /** The configured grant (password or client_credentials), with the credentials as they are now. */
  async primaryGrant (): Promise<TokenSet> {
    const creds = this.#o.credentials.read()
    this.#o.secrets.add(creds.password)
    const fields = this.grantType === 'client_credentials' ? clientCredentialsGrant() : passwordGrant(creds.username ?? '', creds.password ?? '')
    return await this.#send(this.grantType, fields)
  }

  /** The refresh grant. */
  async refreshGrant (refreshToken: string): Promise<TokenSet> {
    return await this.#send('refresh_token', refreshGrant(refreshToken))
  }

  /** The client's key as its assertions name it (private_key_jwt), for `check`. */
  async clientKey (): Promise<{ alg: string, kid: string } | undefined> {
    return await this.#o.client.keyDescription(this.#o.credentials.read())
  }

  async #send (grant: GrantType, fields: Fields): Promise<TokenSet> {
    try {
      let set: TokenSet
      try {
        set = await this.#post(grant, this.#tokenUrl ?? '', fields)
      } catch (err) {
        const alternate = this.#alternateTokenUrl
        if (!(err instanceof GrantError) || err.kind !== 'wrong_url' || alternate === undefined || this.#stopped) throw err
        // Keycloak 17+ serves without /auth, older ones with it: the URL was
        // derived from AUTH_URL, so the other layout is tried, once.
        this.#alternateTokenUrl = undefined
        set = await this.#post(grant, alternate, fields).catch((again: unknown) => {
          // only a token endpoint judges a grant: 400 or 401 with an OAuth error
          const judged = again instanceof GrantError && again.kind === 'rejected' && (again.status === 400 || again.status === 401) && again.oauthError !== undefined
          if (!judged) throw err
          this.#useAlternate(alternate)
          throw again
        })
        this.#useAlternate(alternate)
      }
      this.#o.onGrant?.(grant, 'success')
      return set
    } catch (err) {
      this.#o.onGrant?.(grant, (err as GrantError).kind === 'rejected' ? 'rejected' : 'error')
      throw err
    }
  }

  #useAlternate (url: string): void {
    const configured = this.#tokenUrl
    this.#tokenUrl = url
    this.#o.log.warn({ event: 'token', tokenUrl: url, derivedTokenUrl: configured },
      `the token endpoint answers at ${url}, not at ${configured}: using it. Set AUTH_TOKEN_URL=${url} to skip the first try`)
  }

  /** One request to the token endpoint at `url`, its answer checked. */
  async #post (grant: GrantType, url: string, fields: Fields): Promise<TokenSet> {
    this.#o.log.debug({ event: 'token', grant, tokenUrl: url }, 'token request')
    const res = await this.#exchange(url, url, fields, this.#o.extras, 'token', this.#o.timeoutMs)
    this.#o.log.debug({ event: 'token', grant, status: res.status }, 'token endpoint answered')
    let set: TokenSet
    try {
      set = checkTokenResponse(res)
    } catch (err) {
      if (err instanceof GrantError && err.kind === 'wrong_url') {
        throw new GrantError(`POST ${url}: ${err.message}`, 'wrong_url', { ...(err.status !== undefined && { status: err.status }) })
      }
      throw err
    }
    // a token the server did not bind to the key is not used, not even as a bearer token
    if (this.#o.dpop !== undefined && set.tokenType.toLowerCase() !== 'dpop') {
      throw new GrantError(`the token endpoint answered with a ${set.tokenType === '' ? 'token without token_type' : `${set.tokenType} token`}, not a DPoP-bound one: turn on "Require DPoP bound tokens" for the client in Keycloak 26.4 or later (Advanced, Proof of Possession), or set AUTH_DPOP=false`, 'unusable', { status: 200 })
    }
    return set
  }

  /** The scheme of the Authorization header the tokens go in. */
  get scheme (): 'DPoP' | 'Bearer' {
    return this.#o.dpop === undefined ? 'Bearer' : 'DPoP'
  }

  /** The DPoP key, in DPoP mode. */
  get dpop (): DpopKey | undefined {
    return this.#o.dpop
  }

  /**
   * One POST of a form to the auth server: the client authenticated (its
   * assertions for `audience`), a DPoP proof with the server's newest nonce
   * in DPoP mode. Asked for a nonce (`use_dpop_nonce`), it is sent once more
   * with it, never in a loop.
   */
  async #exchange (url: string, audience: string, fields: Fields, extras: GrantExtras | undefined, purpose: RequestPurpose, timeoutMs: number): Promise<TokenEndpointResponse> {
    for (let attempt = 0; ; attempt++) {
      const request = buildRequest(await this.#prove(audience), fields, extras)
      const headers: Record<string, string> = {
        ...(request.authorization !== undefined && { authorization: request.authorization }),
        ...(this.#o.dpop !== undefined && { dpop: this.#o.dpop.proof('POST', htuOf(url), { nonce: this.#nonce }) })
      }
      const res = await this.request(purpose, timeoutMs, (signal) => this.#o.post(url, request.form, signal, headers))
      const nonce = dpopNonceOf(res.dpopNonce)
      if (nonce !== undefined) this.#nonce = nonce
      if (attempt > 0 || this.#o.dpop === undefined || res.status !== 400 || nonce === undefined || oauthErrorOf(res).error !== 'use_dpop_nonce') return res
      this.#o.log.debug({ event: 'token', purpose }, 'the auth server asked for a DPoP nonce: sending again with it')
    }
  }

  /**
   * One request to the auth server, aborted after `timeoutMs`; a network
   * error or timeout becomes a transient GrantError. Token and discovery
   * requests are also aborted by stop(); the session ending, which runs
   * after it, is not.
   */
  async request (purpose: RequestPurpose, timeoutMs: number, send: (signal: AbortSignal) => Promise<TokenEndpointResponse>): Promise<TokenEndpointResponse> {
    const abort = new AbortController()
    const tracked = purpose !== 'logout'
    if (tracked) this.#abort = abort
    const timer = this.#o.clock.setTimeout(() => abort.abort(), timeoutMs)
    try {
      return await send(abort.signal)
    } catch (err) {
      const message = abort.signal.aborted
        ? `${purpose} request timed out after ${timeoutMs} ms`
        : `${purpose} request failed: ${describeNetworkError(err)}`
      throw new GrantError(message, 'transient', { cause: err })
    } finally {
      this.#o.clock.clearTimeout(timer)
      if (tracked && this.#abort === abort) this.#abort = undefined
    }
  }

  /**
   * Sends a form to one of the server's endpoints (end-session, revocation),
   * the client authenticated as for a grant.
   */
  async postForm (url: string, fields: Fields, timeoutMs: number): Promise<TokenEndpointResponse> {
    return await this.#exchange(url, this.#tokenUrl ?? url, fields, undefined, 'logout', timeoutMs)
  }

  /**
   * The client's part of a request, with the credentials as they are now;
   * what is secret in it is known to the scrubber before anything is sent
   * (a server that echoes the form or the header echoes it).
   */
  async #prove (audience: string): Promise<{ fields: Fields, authorization?: string }> {
    const creds = this.#o.credentials.read()
    this.#o.secrets.add(creds.clientSecret)
    const proof = await this.#o.client.prove(creds, audience)
    for (const secret of proof.secrets) this.#o.secrets.addToken(secret)
    return proof
  }
}

function describeNetworkError (err: unknown): string {
  const e = err as { code?: string, message?: string, cause?: { code?: string } }
  return e.code ?? e.cause?.code ?? e.message ?? 'unknown error'
}
