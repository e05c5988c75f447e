import type { Credentials } from '../config/credentials.js'
import { TokenUnavailableError } from '../errors.js'
import type { Logger } from '../logger.js'
import { SecretScrubber } from '../secrets.js'
import { MAX_TIMER_MS, systemClock, type Clock } from './clock.js'
import { checkDiscovery, wellKnownUrl, type Endpoints } from './discovery.js'
import {
  checkTokenResponse, clientCredentialsGrant, endSessionRequest, GrantError, isCredentialRejection, oauthErrorOf, passwordGrant,
  refreshGrant, revocationRequest, type GetJson, type GrantInput, type GrantRequest, type GrantType, type PostForm,
  type PrimaryGrant, type TokenEndpointResponse, type TokenSet
} from './grant.js'
import { backoffDelay, renewalDelay, slowRetryDelay, usableFor } from './schedule.js'

export type GrantOutcome = 'success' | 'rejected' | 'error'

/** How ending the session on shutdown went; `skipped`: there was none to end, or no endpoint to end it at. */
export type LogoutOutcome = 'success' | 'rejected' | 'error' | 'skipped'

export interface LogoutResult {
  outcome: LogoutOutcome
  /** one human sentence, secret-free */
  detail: string
}

/** 401-caused renewals in a row wait 0, then 1 s, doubling up to 60 s (SPEC §10.3). */
export const UPSTREAM_401_BACKOFF_MIN_MS = 1_000
export const UPSTREAM_401_BACKOFF_MAX_MS = 60_000

export interface TokenManagerOptions {
  /** undefined: the token endpoint comes from discovery (issuerUrl) */
  tokenUrl?: string
  /** AUTH_ISSUER_URL: discovery runs before the first grant */
  issuerUrl?: string
  /** the grant that obtains a token from the credentials; password by default */
  grantType?: PrimaryGrant
  /** Keycloak's other layout of the same URL, tried once should tokenUrl not be a token endpoint */
  alternateTokenUrl?: string
  client: GrantInput
  credentials: { read(): Credentials, onChange?(listener: () => void): void }
  post: PostForm
  /** for discovery; required with issuerUrl */
  get?: GetJson
  log: Logger
  timeoutMs: number
  waitMs: number
  retryMinMs: number
  retryMaxMs: number
  rejectedRetryMs: number
  clock?: Clock
  random?: () => number
  onGrant?: (grant: GrantType, outcome: GrantOutcome) => void
  onLogout?: (outcome: LogoutOutcome) => void
  /** replaces known secret values in texts before they are logged */
  secrets?: SecretScrubber
}

/** What a proxied request needs: an Authorization header value, now or soon. */
export interface AuthorizationSource {
  /** The header for a token that is valid now, or undefined. */
  current(): string | undefined
  /** The header, waiting (bounded) for a token being obtained; rejects with TokenUnavailableError. */
  authorization(): Promise<string>
  /**
   * The upstream rejected this header: drop it and obtain another, once per
   * header. Returns whether a new one is being obtained (a replay may wait
   * for it); false while 401-caused renewals back off, or when another
   * request's 401 already replaced it.
   */
  rejected(header: string): boolean
  /** The upstream answered something other than 401: 401-caused renewals stop backing off. */
  accepted(): void
  /** Whether a valid credential is held (readiness). */
  ready(): boolean
  /** Why not ready, in a few words an operator can act on; undefined when ready. */
  notReadyReason(): string | undefined
  /** Seconds until the held credential expires; 0 without one. */
  expiresInSeconds(): number
  start(): void
  stop(): void
  /**
   * Ends the auth server session the credential opened (SPEC §9), best
   * effort, within `timeoutMs`; the credential is dropped. Call after stop().
   */
  endSession(timeoutMs: number): Promise<LogoutResult>
}

interface HeldToken {
  header: string
  receivedAt: number
  lifetimeMs: number
  usableUntil: number
}

interface HeldRefresh {
  token: string
  /** undefined: it does not lapse on its own */
  usableUntil: number | undefined
}

interface Waiter {
  resolve: (header: string) => void
  reject: (err: Error) => void
  deadline: number
  timer: unknown
}

/**
 * Keeps one access token fresh (SPEC §4): the password grant at start, the
 * refresh grant before expiry, the password grant again when the refresh
 * token lapses or is refused, backoff through outages, and never more than
 * one grant request in flight.
 */
export class TokenManager implements AuthorizationSource {
  readonly #o: TokenManagerOptions
  readonly #clock: Clock
  readonly #random: () => number
  #token: HeldToken | undefined
  #refresh: HeldRefresh | undefined
  #inflight: Promise<void> | undefined
  #abort: AbortController | undefined
  #timer: unknown
  /** when the pending retry after a failure is due; undefined when not in backoff */
  #retryAt: number | undefined
  #waitingOnCredentials = false
  #failures = 0
  #lastFailure = ''
  /** what the last failed grant ran into, for readiness */
  #lastFailureKind: 'credentials' | 'rejected' | 'wrong_url' | 'transient' | 'discovery' | undefined
  /** undefined until discovery has named it */
  #tokenUrl: string | undefined
  /** what discovery found; undefined until it has run (or without AUTH_ISSUER_URL) */
  #endpoints: Endpoints | undefined
  /** the other Keycloak layout, until it has been tried */
  #alternateTokenUrl: string | undefined
  #stopped = false
  readonly #waiters = new Set<Waiter>()
  /** renewals caused by upstream 401s with no other upstream answer in between */
  readonly #secrets: SecretScrubber
  #renewals401 = 0
  #next401RenewalAt = 0
  #backoffLogged = false

  constructor (options: TokenManagerOptions) {
    this.#o = options
    this.#secrets = options.secrets ?? new SecretScrubber()
    this.#tokenUrl = options.tokenUrl
    this.#alternateTokenUrl = options.alternateTokenUrl
    this.#clock = options.clock ?? systemClock
    this.#random = options.random ?? Math.random
  }

  start (): void {
    this.#o.credentials.onChange?.(() => {
      if (this.#waitingOnCredentials && !this.#stopped) {
        this.#o.log.info({ event: 'token' }, 'credential file changed: retrying the grant now')
        this.#renewNow()
      }
    })
    this.#renewNow()
  }

  stop (): void {
    this.#stopped = true
    this.#clock.clearTimeout(this.#timer)
    this.#abort?.abort()
    this.#failWaiters(() => true)
  }

  current (): string | undefined {
    const t = this.#token
    return t !== undefined && this.#clock.now() < t.usableUntil ? t.header : undefined
  }

  ready (): boolean {
    return this.current() !== undefined
  }

  notReadyReason (): string | undefined {
    if (this.ready()) return undefined
    switch (this.#lastFailureKind) {
      case 'credentials': return 'credentials rejected by the auth server (see the log for its reason)'
      case 'rejected': return 'token request refused by the auth server (see the log for its reason)'
      case 'wrong_url': return `wrong token URL: ${this.#tokenUrl ?? ''} is not a token endpoint (set AUTH_URL and AUTH_REALM, AUTH_ISSUER_URL, or AUTH_TOKEN_URL)`
      case 'discovery': return `OpenID Connect discovery at ${wellKnownUrl(this.#o.issuerUrl ?? '')} failed (see the log); retrying`
      case 'transient': return 'token endpoint unreachable or failing; retrying'
      default: return 'no valid access token'
    }
  }

  expiresInSeconds (): number {
    const t = this.#token
    if (t === undefined) return 0
    return Math.max(0, (t.receivedAt + t.lifetimeMs - this.#clock.now()) / 1000)
  }

  authorization (): Promise<string> {
    const header = this.current()
    if (header !== undefined) return Promise.resolve(header)
    if (this.#stopped) return Promise.reject(new TokenUnavailableError(1))

    const now = this.#clock.now()
    if (this.#inflight === undefined) {
      if (this.#retryAt === undefined) {
        // the token ran out before its renewal (a stalled event loop, say)
        this.#renewNow()
      } else if (this.#retryAt - now > this.#o.waitMs) {
        return Promise.reject(new TokenUnavailableError(secondsUntil(this.#retryAt - now)))
      }
    }
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        resolve,
        reject,
        deadline: now + this.#o.waitMs,
        timer: this.#clock.setTimeout(() => {
          this.#waiters.delete(waiter)
          reject(new TokenUnavailableError(this.#retryAfterSeconds()))
        }, this.#o.waitMs)
      }
      this.#waiters.add(waiter)
    })
  }

  rejected (header: string): boolean {
    const token = this.#token
    if (token === undefined || token.header !== header) return true // already replaced: one renewal per rejected token
    const now = this.#clock.now()
    if (now < this.#next401RenewalAt) {
      // An upstream that rejects every token would otherwise drive a grant
      // per request (SPEC §10.3): the 401 is relayed and the token kept.
      if (!this.#backoffLogged) this.#o.log.warn({ event: 'token', reason: 'upstream_401', renewalsInARow: this.#renewals401, nextRenewalInMs: Math.round(this.#next401RenewalAt - now) }, 'upstream rejects new tokens too: keeping the token, the next renewal on a 401 waits')
      this.#backoffLogged = true
      return false
    }
    this.#renewals401 += 1
    this.#next401RenewalAt = now + Math.min(UPSTREAM_401_BACKOFF_MAX_MS, UPSTREAM_401_BACKOFF_MIN_MS * 2 ** Math.min(this.#renewals401 - 1, 30))
    this.#backoffLogged = false
    this.#token = undefined
    this.#o.log.warn({ event: 'token', reason: 'upstream_401' }, 'upstream rejected the access token: obtaining a new one')
    this.#renewNow()
    return true
  }

  accepted (): void {
    if (this.#renewals401 !== 0) {
      this.#renewals401 = 0
      this.#next401RenewalAt = 0
    }
  }

  #renewNow (): void {
    if (this.#inflight !== undefined || this.#stopped) return
    this.#clock.clearTimeout(this.#timer)
    this.#retryAt = undefined
    this.#waitingOnCredentials = false
    this.#inflight = this.#attempt().finally(() => { this.#inflight = undefined })
  }

  async #attempt (): Promise<void> {
    let step: GrantType | 'discovery' = this.#primaryGrant
    try {
      if (this.#needsDiscovery) {
        step = 'discovery'
        await this.discover()
        step = this.#primaryGrant
      }
      let set: TokenSet | undefined
      const refresh = this.#refresh
      if (refresh !== undefined && (refresh.usableUntil === undefined || this.#clock.now() < refresh.usableUntil)) {
        // A refresh token is sent once, whatever happens: with rotation on, a
        // second use would be refused, and may revoke the session.
        this.#refresh = undefined
        step = 'refresh_token'
        try {
          set = await this.#send(step, refreshGrant(this.#client(), refresh.token))
        } catch (err) {
          if (!(err instanceof GrantError) || err.kind !== 'rejected' || this.#stopped) throw err
          this.#o.log.info({ event: 'token', grant: step, outcome: 'rejected', reason: this.#secrets.scrub(err.message) }, `refresh token refused: falling back to the ${this.#primaryGrant} grant`)
          step = this.#primaryGrant
        }
      }
      if (set === undefined) {
        this.#refresh = undefined
        set = await this.#send(step as PrimaryGrant, this.#primaryRequest())
      }
      this.#store(set, step as GrantType)
    } catch (err) {
      if (this.#stopped) return
      this.#failed(step, err)
    }
  }

  get #primaryGrant (): PrimaryGrant {
    return this.#o.grantType ?? 'password'
  }

  get #needsDiscovery (): boolean {
    return this.#o.issuerUrl !== undefined && this.#endpoints === undefined
  }

  /** The client's part of every request: its id, its secret as it is now, the scope and AUTH_TOKEN_PARAMS. */
  #client (clientSecret = this.#o.credentials.read().clientSecret): GrantInput {
    this.#secrets.add(clientSecret)
    const { clientSecret: _configured, ...client } = this.#o.client
    return { ...client, ...(clientSecret !== undefined && { clientSecret }) }
  }

  /** The password or client_credentials grant, with the credentials as they are now. */
  #primaryRequest (): GrantRequest {
    const creds = this.#o.credentials.read()
    this.#secrets.add(creds.password)
    const client = this.#client(creds.clientSecret)
    return this.#primaryGrant === 'client_credentials'
      ? clientCredentialsGrant(client)
      : passwordGrant(client, creds.username ?? '', creds.password ?? '')
  }

  /**
   * OpenID Connect discovery (AUTH_ISSUER_URL), once for the process's life:
   * the token endpoint (unless AUTH_TOKEN_URL is set) and the end-session
   * and revocation endpoints. Throws a GrantError; undefined without an issuer.
   */
  async discover (): Promise<Endpoints | undefined> {
    const issuer = this.#o.issuerUrl
    if (issuer === undefined || this.#o.get === undefined) return undefined
    if (this.#endpoints !== undefined) return this.#endpoints
    const url = wellKnownUrl(issuer)
    this.#o.log.debug({ event: 'discovery', url }, 'discovery request')
    const res = await this.#bounded(this.#o.timeoutMs, (signal) => this.#o.get!(url, signal), 'discovery')
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

  /**
   * One grant with the configured credentials, now, without the retries
   * (the `check` command): discovery first if it has not run. The token is
   * held as after any grant. Throws a GrantError whose message is scrubbed.
   */
  async grantOnce (): Promise<{ grant: PrimaryGrant, tokenUrl: string, set: TokenSet }> {
    try {
      await this.discover()
      const set = await this.#send(this.#primaryGrant, this.#primaryRequest())
      this.#store(set, this.#primaryGrant)
      return { grant: this.#primaryGrant, tokenUrl: this.#tokenUrl ?? '', set }
    } catch (err) {
      const e = err instanceof GrantError ? err : new GrantError(String(err), 'transient')
      throw new GrantError(this.#secrets.scrub(e.message), e.kind, {
        ...(e.oauthError !== undefined && { oauthError: e.oauthError }),
        ...(e.status !== undefined && { status: e.status })
      })
    }
  }

  async endSession (timeoutMs: number): Promise<LogoutResult> {
    const refresh = this.#refresh
    const token = this.#token
    this.#refresh = undefined
    this.#token = undefined
    const { outcome, detail } = await this.#endSession(refresh?.token, token?.header.slice('Bearer '.length), timeoutMs)
    const said = this.#secrets.scrub(detail)
    this.#o.onLogout?.(outcome)
    this.#o.log[outcome === 'success' || outcome === 'skipped' ? 'info' : 'warn']({ event: 'logout', outcome }, said)
    return { outcome, detail: said }
  }

  async #endSession (refreshToken: string | undefined, accessToken: string | undefined, timeoutMs: number): Promise<LogoutResult> {
    if (refreshToken === undefined && accessToken === undefined) return { outcome: 'skipped', detail: 'no session to end: no token was obtained' }
    const endSessionUrl = this.#endpoints?.endSessionUrl ?? (this.#o.issuerUrl === undefined ? keycloakLogoutUrl(this.#tokenUrl) : undefined)
    const revocationUrl = this.#endpoints?.revocationUrl
    let url: string
    let request: GrantRequest
    let endpoint: string
    if (refreshToken !== undefined && endSessionUrl !== undefined) {
      url = endSessionUrl
      request = endSessionRequest(this.#client(), refreshToken)
      endpoint = 'end-session endpoint'
    } else if (revocationUrl !== undefined) {
      url = revocationUrl
      request = revocationRequest(this.#client(), refreshToken ?? accessToken!, refreshToken !== undefined ? 'refresh_token' : 'access_token')
      endpoint = 'revocation endpoint'
    } else if (refreshToken === undefined) {
      return { outcome: 'skipped', detail: 'no session to end: no refresh token was issued and the server offers no revocation endpoint' }
    } else {
      return { outcome: 'skipped', detail: 'session left open: no end-session endpoint is known (the token URL does not end in /token; set AUTH_ISSUER_URL)' }
    }
    if (timeoutMs <= 0) return { outcome: 'skipped', detail: 'session left open: no time left in the shutdown grace period' }
    this.#secrets.add(request.authorization?.slice('Basic '.length))
    try {
      const res = await this.#bounded(timeoutMs, (signal) => this.#o.post(url, request.form, signal, request.authorization), 'logout')
      if (res.status >= 200 && res.status < 300) return { outcome: 'success', detail: `session ended: the ${endpoint} ${url} answered ${res.status}` }
      const answer = oauthErrorOf(res)
      const error = answer.error?.slice(0, 100)
      const description = answer.description
      const what = `the ${endpoint} ${url} answered ${res.status}${error === undefined ? '' : ` ${error}${description === '' ? '' : ` (${description})`}`}`
      return res.status >= 400 && res.status < 500 && error !== undefined
        ? { outcome: 'rejected', detail: `session not ended: ${what}` }
        : { outcome: 'error', detail: `session not ended: ${what}${res.status === 404 || res.status === 405 ? ' (no such endpoint on this server: set AUTH_LOGOUT_ON_SHUTDOWN=false, or AUTH_ISSUER_URL)' : ''}` }
    } catch (err) {
      return { outcome: 'error', detail: `session not ended: ${(err as Error).message}` }
    }
  }

  async #send (grant: GrantType, request: GrantRequest): Promise<TokenSet> {
    try {
      let set: TokenSet
      try {
        set = await this.#post(grant, this.#tokenUrl ?? '', request)
      } catch (err) {
        const alternate = this.#alternateTokenUrl
        if (!(err instanceof GrantError) || err.kind !== 'wrong_url' || alternate === undefined || this.#stopped) throw err
        // Keycloak 17+ serves without /auth, older ones with it: the URL was
        // derived from AUTH_URL, so the other layout is tried, once.
        this.#alternateTokenUrl = undefined
        set = await this.#post(grant, alternate, request).catch((again: unknown) => {
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
  async #post (grant: GrantType, url: string, request: GrantRequest): Promise<TokenSet> {
    // client_secret_basic: a server that echoes the header echoes the secret, Base64'd
    this.#secrets.add(request.authorization?.slice('Basic '.length))
    this.#o.log.debug({ event: 'token', grant, tokenUrl: url }, 'token request')
    const res = await this.#bounded(this.#o.timeoutMs, (signal) => this.#o.post(url, request.form, signal, request.authorization), 'token')
    this.#o.log.debug({ event: 'token', grant, status: res.status }, 'token endpoint answered')
    try {
      return checkTokenResponse(res)
    } catch (err) {
      if (err instanceof GrantError && err.kind === 'wrong_url') {
        throw new GrantError(`POST ${url}: ${err.message}`, 'wrong_url', { ...(err.status !== undefined && { status: err.status }) })
      }
      throw err
    }
  }

  /** One request to the auth server, aborted after `timeoutMs`; a network error or timeout becomes a transient GrantError. */
  async #bounded (timeoutMs: number, send: (signal: AbortSignal) => Promise<TokenEndpointResponse>, what: 'token' | 'discovery' | 'logout'): Promise<TokenEndpointResponse> {
    const abort = new AbortController()
    const tracked = what !== 'logout'
    if (tracked) this.#abort = abort
    const timer = this.#clock.setTimeout(() => abort.abort(), timeoutMs)
    try {
      return await send(abort.signal)
    } catch (err) {
      const message = abort.signal.aborted
        ? `${what} request timed out after ${timeoutMs} ms`
        : `${what} request failed: ${describeNetworkError(err)}`
      throw new GrantError(message, 'transient', { cause: err })
    } finally {
      this.#clock.clearTimeout(timer)
      if (tracked) this.#abort = undefined
    }
  }

  #store (set: TokenSet, grant: GrantType): void {
    this.#secrets.addToken(set.accessToken)
    this.#secrets.addToken(set.refreshToken)
    const now = this.#clock.now()
    const header = `Bearer ${set.accessToken}`
    this.#token = { header, receivedAt: now, lifetimeMs: set.expiresInMs, usableUntil: now + usableFor(set.expiresInMs) }
    this.#refresh = set.refreshToken === undefined
      ? undefined
      : {
          token: set.refreshToken,
          usableUntil: set.refreshExpiresInMs === undefined ? undefined : now + usableFor(set.refreshExpiresInMs)
        }

    this.#o.log.info({
      event: 'token',
      grant,
      outcome: 'success',
      expiresIn: set.expiresInMs / 1000,
      refreshExpiresIn: set.refreshToken === undefined ? null : (set.refreshExpiresInMs ?? 0) / 1000,
      ...(this.#failures > 0 && { failedAttempts: this.#failures })
    }, this.#failures > 0 ? 'token obtained after failed attempts' : 'token obtained')
    this.#failures = 0
    this.#lastFailure = ''
    this.#lastFailureKind = undefined

    this.#arm(now + renewalDelay(set.expiresInMs, this.#random()), () => this.#renewNow())
    for (const w of this.#waiters) {
      this.#clock.clearTimeout(w.timer)
      w.resolve(header)
    }
    this.#waiters.clear()
  }

  #failed (step: GrantType | 'discovery', err: unknown): void {
    const e = err instanceof GrantError ? err : new GrantError(String(err), 'transient')
    // A wrong URL is retried with the backoff of an outage: no credentials
    // reached a token endpoint, and a gateway's HTML page may be temporary.
    const rejected = e.kind === 'rejected'
    this.#lastFailureKind = step === 'discovery' ? 'discovery' : e.kind === 'rejected' ? (isCredentialRejection(e) ? 'credentials' : 'rejected') : e.kind
    const delay = rejected
      ? slowRetryDelay(this.#o.rejectedRetryMs, this.#random())
      : backoffDelay({ minMs: this.#o.retryMinMs, maxMs: this.#o.retryMaxMs }, this.#failures, this.#random(), e.retryAfterMs)
    this.#failures += 1

    const fields = {
      event: step === 'discovery' ? 'discovery' : 'token',
      ...(step !== 'discovery' && { grant: step }),
      outcome: rejected ? 'rejected' : 'error',
      reason: this.#secrets.scrub(e.message),
      attempt: this.#failures,
      retryInMs: Math.round(delay),
      tokenValid: this.current() !== undefined
    }
    if (e.kind === 'rejected' && isCredentialRejection(e)) {
      // Every attempt is logged: they are a minute apart, and an operator must see them.
      this.#o.log.error(fields, 'credentials rejected by the auth server: retrying slowly to avoid a lockout')
    } else if (step === 'discovery' && e.kind === 'wrong_url' && e.message !== this.#lastFailure) {
      this.#o.log.error(fields, 'discovery failed: check AUTH_ISSUER_URL (Keycloak\'s is https://host/realms/<realm>)')
    } else if (e.kind === 'wrong_url' && e.message !== this.#lastFailure) {
      this.#o.log.error(fields, 'wrong token URL: check AUTH_URL and AUTH_REALM, or set AUTH_TOKEN_URL to the realm\'s token endpoint')
    } else if (e.message !== this.#lastFailure) {
      this.#o.log[rejected ? 'error' : 'warn'](fields, 'token request failed')
    } else {
      // the same failure again: once per episode at warn, the repeats at debug
      this.#o.log.debug(fields, 'token request failed again')
    }
    this.#lastFailure = e.message
    this.#o.log.debug({ event: fields.event, ...(step !== 'discovery' && { grant: step }), failure: e.kind, retryInMs: Math.round(delay) }, `${fields.event} request will be retried`)

    const retryAt = this.#clock.now() + delay
    this.#arm(retryAt, () => this.#renewNow())
    this.#retryAt = retryAt
    this.#waitingOnCredentials = rejected
    this.#failWaiters((w) => w.deadline < retryAt)
  }

  #failWaiters (which: (w: Waiter) => boolean): void {
    for (const w of this.#waiters) {
      if (!which(w)) continue
      this.#clock.clearTimeout(w.timer)
      this.#waiters.delete(w)
      w.reject(new TokenUnavailableError(this.#retryAfterSeconds()))
    }
  }

  #retryAfterSeconds (): number {
    return this.#retryAt === undefined ? 1 : secondsUntil(this.#retryAt - this.#clock.now())
  }

  /** Runs `fn` at `dueAt`, re-arming across the timer's 24.8-day limit. */
  #arm (dueAt: number, fn: () => void): void {
    this.#clock.clearTimeout(this.#timer)
    const wait = (): void => {
      const left = dueAt - this.#clock.now()
      if (left > MAX_TIMER_MS) {
        this.#timer = this.#clock.setTimeout(wait, MAX_TIMER_MS)
      } else {
        this.#timer = this.#clock.setTimeout(fn, Math.max(0, left))
      }
    }
    wait()
  }
}

function secondsUntil (ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000))
}

/** Keycloak's end-session endpoint: the token URL with its last segment `token` replaced by `logout`. */
export function keycloakLogoutUrl (tokenUrl: string | undefined): string | undefined {
  if (tokenUrl === undefined) return undefined
  const url = new URL(tokenUrl)
  if (!url.pathname.endsWith('/token')) return undefined
  url.pathname = `${url.pathname.slice(0, -'token'.length)}logout`
  return url.href
}

function describeNetworkError (err: unknown): string {
  const e = err as { code?: string, message?: string, cause?: { code?: string } }
  return e.code ?? e.cause?.code ?? e.message ?? 'unknown error'
}
