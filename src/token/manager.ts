import { EventEmitter } from 'node:events'
import { TokenUnavailableError } from '../errors.js'
import type { Logger } from '../logger.js'
import type { SecretScrubber } from '../secrets.js'
import type { PrimaryGrant } from '../config/load.js'
import { dpopRefusalOf, refusesScope } from './challenge.js'
import { MAX_TIMER_MS, systemClock, type Clock } from './clock.js'
import type { Authorization, Credential, CredentialEvents, HeaderValue, LogoutResult, Verdict } from './credential.js'
import type { Endpoints } from './discovery.js'
import { dpopNonceOf } from './dpop.js'
import { classify, logFailure, notReadyText, type FailureClass } from './failures.js'
import { GrantError, refusesSubject, type GrantType, type TokenSet } from './grant.js'
import type { OAuthClient } from './oauth-client.js'
import { RejectionBackoff } from './rejection-backoff.js'
import { backoffDelay, renewalDelay, slowRetryDelay, usableFor } from './schedule.js'
import { endSession } from './session.js'
import { Waiters } from './waiters.js'

export interface TokenManagerOptions {
  server: OAuthClient
  /** re-read credentials: a changed file is tried at once after a rejection */
  credentials: { onChange?(listener: () => void): void }
  log: Logger
  /** longest a request waits for a token being obtained (TOKEN_WAIT_MS) */
  waitMs: number
  retryMinMs: number
  retryMaxMs: number
  rejectedRetryMs: number
  clock?: Clock
  random?: () => number
  /** replaces known secret values in texts before they are logged */
  secrets: SecretScrubber
  /** the token is obtained by token exchange of another credential's, for this audience */
  exchange?: { subject: TokenManager, audience: string, scope?: string }
}

interface HeldToken {
  authorization: Authorization
  accessToken: string
  receivedAt: number
  lifetimeMs: number
  usableUntil: number
}

interface HeldRefresh {
  token: string
  /** undefined: it does not lapse on its own */
  usableUntil: number | undefined
}

/**
 * Keeps one access token fresh: the password grant at start, the refresh
 * grant before expiry, the password grant again when the refresh token
 * lapses or is refused, backoff through outages, and never more than one
 * grant request in flight. With `exchange`, the token is obtained and
 * renewed by token exchange of another credential's current token instead.
 */
export class TokenManager implements Credential {
  readonly kind = 'oauth2'
  readonly events = new EventEmitter<CredentialEvents>()
  readonly #o: TokenManagerOptions
  readonly #server: OAuthClient
  readonly #clock: Clock
  readonly #random: () => number
  readonly #waiters: Waiters<Authorization>
  #token: HeldToken | undefined
  /** the token #token replaced, kept while valid when it is bound to another client certificate */
  #previous: HeldToken | undefined
  #refresh: HeldRefresh | undefined
  #inflight: Promise<void> | undefined
  /** why the renewal in flight was started */
  #cause: 'schedule' | 'upstream_401' = 'schedule'
  #timer: unknown
  /** when the pending retry after a failure is due; undefined when not in backoff */
  #retryAt: number | undefined
  #waitingOnCredentials = false
  #failures = 0
  #lastFailure = ''
  /** what the last failed grant ran into, for readiness */
  #lastFailureKind: FailureClass | undefined
  #stopped = false
  /** a grant answered after stop(): never used, only its session ended */
  #lateGrant: TokenSet | undefined
  readonly #secrets: SecretScrubber
  /** renewals caused by upstream 401s, paced */
  readonly #rejections = new RejectionBackoff()
  /** the upstream's newest DPoP nonce */
  #upstreamNonce: string | undefined
  /** an exchanged token waits for its subject's next token, the certificate having changed */
  #awaitingSubject = false
  /** exchange: the subject tokens the exchange refused, newest last; none is sent again */
  readonly #refusedSubjects = new Set<string>()
  /** exchange: refusals of the subject token since the last exchange that worked */
  #subjectRefusedInARow = 0
  /** exchange: the last attempt is retried as soon as the subject holds a new token */
  #waitingOnSubject = false
  /** the refused token of this credential's whose renewal an exchange asked for: asked once per token */
  #renewalAskedFor: string | undefined

  constructor (options: TokenManagerOptions) {
    this.#o = options
    this.#server = options.server
    this.#secrets = options.secrets
    this.#clock = options.clock ?? systemClock
    this.#random = options.random ?? Math.random
    this.#waiters = new Waiters(this.#clock, options.waitMs, () => this.#retryAfterSeconds())
  }

  start (): void {
    this.#o.credentials.onChange?.(() => {
      if (this.#waitingOnCredentials && !this.#stopped) {
        this.#o.log.info({ event: 'token' }, 'credential file changed: retrying the grant now')
        this.#renewNow()
      }
    })
    this.#o.exchange?.subject.events.on('token', () => {
      if (!this.#waitingOnSubject || this.#stopped) return
      this.#waitingOnSubject = false
      this.#o.log.info({ event: 'token', grant: 'token_exchange' }, 'the token to exchange was renewed: exchanging it now')
      this.#renewNow()
    })
    // a token already held (`check`'s) is kept and renewed on its schedule
    if (this.#token === undefined) this.#renewNow()
  }

  stop (): void {
    this.#stopped = true
    this.#clock.clearTimeout(this.#timer)
    this.#server.stop()
    this.#waiters.failBefore()
  }

  current (): Authorization | undefined {
    const t = this.#token
    return t !== undefined && this.#clock.now() < t.usableUntil ? t.authorization : undefined
  }

  ready (): boolean {
    return this.current() !== undefined
  }

  boundTo (certificate: string): Authorization | undefined {
    const now = this.#clock.now()
    for (const t of [this.#token, this.#previous]) {
      if (t !== undefined && t.authorization.certificate === certificate && now < t.usableUntil) return t.authorization
    }
    return undefined
  }

  notReadyReason (): string | undefined {
    return this.ready() ? undefined : notReadyText(this.#lastFailureKind, { tokenUrl: this.#server.tokenUrl, discoveryUrl: this.#server.discoveryUrl }, this.#secrets.scrub(this.#lastFailure))
  }

  expiresInSeconds (): number {
    const t = this.#token
    if (t === undefined) return 0
    return Math.max(0, (t.receivedAt + t.lifetimeMs - this.#clock.now()) / 1000)
  }

  authorize (): Promise<Authorization> {
    const held = this.current()
    if (held !== undefined) return Promise.resolve(held)
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
    return this.#waiters.wait()
  }

  answered (authorization: Authorization, status: number, challenge: HeaderValue, nonce: HeaderValue): Verdict {
    if (nonce !== undefined && this.#server.dpop !== undefined) this.#upstreamNonce = dpopNonceOf(nonce) ?? this.#upstreamNonce
    if (status !== 401) return 'relay'
    const refusal = dpopRefusalOf(challenge)
    if (refusal !== undefined) {
      // the proof was refused, not the token: asked for a nonce, the request may go once more with it
      this.events.emit('dpop_refused', refusal)
      return refusal === 'use_dpop_nonce' ? 'replay' : 'relay'
    }
    // the token is fine but lacks a scope: a new one would lack it too
    if (refusesScope(challenge)) return 'relay'
    const token = this.#token
    if (token === undefined || token.authorization !== authorization) return 'renewed' // already replaced: one renewal per rejected token
    const { waitMs, inARow, first } = this.#rejections.take(this.#clock.now())
    if (waitMs > 0) {
      // the 401 is relayed and the token kept
      if (first) this.#o.log.warn({ event: 'token', reason: 'upstream_401', renewalsInARow: inARow, nextRenewalInMs: Math.round(waitMs) }, 'upstream rejects new tokens too: keeping the token, the next renewal on a 401 waits')
      return 'relay'
    }
    this.#token = undefined
    this.#o.log.warn({ event: 'token', reason: 'upstream_401' }, 'upstream rejected the access token: obtaining a new one')
    this.#renewNow('upstream_401')
    return 'renewed'
  }

  /**
   * The client certificate changed (the files were renewed): the token, and
   * its refresh token, may be bound to the old one, so a new token is
   * obtained now with the new certificate. The current one serves until it
   * comes. An exchanged token is exchanged again once the token it comes
   * from is new.
   */
  certificateChanged (): void {
    if (this.#stopped) return
    const exchange = this.#o.exchange
    if (exchange !== undefined) {
      if (this.#awaitingSubject) return
      this.#awaitingSubject = true
      exchange.subject.events.once('token', () => {
        this.#awaitingSubject = false
        this.#renewAfter()
      })
      return
    }
    this.#refresh = undefined
    this.#renewAfter()
  }

  /** A renewal now, or right after the one in flight (which may have used what just changed). */
  #renewAfter (): void {
    if (this.#inflight === undefined) return this.#renewNow()
    void this.#inflight.then(() => this.#renewNow())
  }

  #renewNow (cause: 'schedule' | 'upstream_401' = 'schedule'): void {
    if (this.#inflight !== undefined || this.#stopped) return
    this.#clock.clearTimeout(this.#timer)
    this.#retryAt = undefined
    this.#waitingOnCredentials = false
    this.#cause = cause
    this.#inflight = this.#attempt().finally(() => { this.#inflight = undefined })
  }

  async #attempt (): Promise<void> {
    const primary: GrantType = this.#o.exchange === undefined ? this.#server.grantType : 'token_exchange'
    let step: GrantType | 'discovery' = primary
    try {
      if (this.#server.needsDiscovery) {
        step = 'discovery'
        await this.#server.discover()
        step = primary
      }
      let set: TokenSet | undefined
      const refresh = this.#refresh
      if (refresh !== undefined && (refresh.usableUntil === undefined || this.#clock.now() < refresh.usableUntil)) {
        step = 'refresh_token'
        try {
          set = await this.#counted('refresh_token', this.#server.refreshGrant(refresh.token))
        } catch (err) {
          // invalid_grant (expired, revoked, reused, session ended) or a 200
          // without a usable token (Keycloak's in an SSO session's last
          // second: expires_in 0) spends the refresh token: the password
          // grant. A network failure or 5xx keeps it, so that a blip opens no
          // new session (a reuse the server refuses is invalid_grant).
          // Another refusal (invalid_client, say) is the client's to fix.
          const spent = err instanceof GrantError && ((err.kind === 'rejected' && err.oauthError === 'invalid_grant') || err.kind === 'unusable')
          if (!spent || this.#stopped) throw err
          this.#o.log.info({ event: 'token', grant: step, outcome: 'rejected', reason: this.#secrets.scrub(err.message) }, `refresh token refused: falling back to the ${primary} grant`)
          step = primary
        }
      }
      if (set === undefined) {
        this.#refresh = undefined
        set = await this.#obtain()
      }
      this.#store(set, step as GrantType)
    } catch (err) {
      if (this.#stopped) return
      this.#failed(step, err)
    }
  }

  /** A new token: the configured grant, or an exchange of the subject credential's. */
  async #obtain (): Promise<TokenSet> {
    const exchange = this.#o.exchange
    if (exchange === undefined) return await this.#counted(this.#server.grantType, this.#server.primaryGrant())
    const { subject, audience, scope } = exchange
    const refused = this.#refusedSubjects
    const token = await this.#subjectToken()
    try {
      const set = await this.#counted('token_exchange', this.#server.exchange(token, audience, scope))
      this.#subjectRefusedInARow = 0
      return set
    } catch (err) {
      // The subject token refused (expired, revoked, its session ended): it
      // is never sent again. The first time, the subject is renewed and the
      // exchange tried once more; a refusal again is paced, as rejected
      // credentials are.
      if (!(err instanceof GrantError && refusesSubject(err)) || this.#stopped) throw err
      refused.add(token)
      if (refused.size > MAX_REFUSED_SUBJECTS) refused.delete(refused.values().next().value!)
      if (this.#subjectRefusedInARow++ > 0) throw err
      this.#o.log.info({ event: 'token', grant: 'token_exchange', outcome: 'rejected', reason: this.#secrets.scrub(err.message) }, 'the subject token was refused: renewing it, then exchanging again')
      const renewed = await subject.accessTokenOtherThan(refused).catch(() => undefined)
      if (renewed === undefined) {
        this.#waitingOnSubject = true
        throw err
      }
      return await this.#counted('token_exchange', this.#server.exchange(renewed, audience, scope))
    }
  }

  /** The subject's token to exchange: never one an exchange refused. */
  async #subjectToken (): Promise<string> {
    try {
      return await this.#o.exchange!.subject.accessTokenOtherThan(this.#refusedSubjects)
    } catch (err) {
      if (err instanceof TokenUnavailableError) throw new GrantError('no token to exchange: its credential holds none yet', 'transient')
      // its only token was refused, and no new one has come yet: the exchange is tried when it comes
      this.#waitingOnSubject = true
      throw err
    }
  }

  /** A grant's outcome, told to whoever counts them. */
  async #counted (grant: GrantType, sent: Promise<TokenSet>): Promise<TokenSet> {
    try {
      const set = await sent
      this.events.emit('grant', grant, 'success')
      return set
    } catch (err) {
      this.events.emit('grant', grant, err instanceof GrantError && err.kind === 'rejected' ? 'rejected' : 'error')
      throw err
    }
  }

  /**
   * The current access token itself, for an exchange, unless an exchange
   * refused it: then a renewal is asked for, once per refused token, while
   * it is still used for everything else (a valid token is kept until its
   * replacement is held), and the new token is awaited for TOKEN_WAIT_MS at
   * most. Rejects with TokenUnavailableError while no token is held, and
   * with a GrantError when no other token came in time.
   */
  async accessTokenOtherThan (refused: ReadonlySet<string>): Promise<string> {
    await this.authorize()
    const held = this.#token!.accessToken
    if (!refused.has(held)) return held
    if (this.#renewalAskedFor !== held) {
      this.#renewalAskedFor = held
      this.#o.log.info({ event: 'token', reason: 'exchange_refused' }, 'an exchange refused the access token: renewing it, the current one still used meanwhile')
      this.#renewAfter()
    }
    const next = await new Promise<string | undefined>((resolve) => {
      const timer = this.#clock.setTimeout(() => {
        this.events.off('token', got)
        resolve(undefined)
      }, this.#o.waitMs)
      const got = (): void => {
        this.#clock.clearTimeout(timer)
        resolve(this.#token?.accessToken)
      }
      this.events.once('token', got)
    })
    if (next === undefined || refused.has(next)) throw new GrantError('the token to exchange was refused, and no new one came in time: exchanging once it comes', 'rejected')
    return next
  }

  /** The client's key as its assertions name it (private_key_jwt), for `check`. */
  async clientKey (): Promise<{ alg: string, kid: string } | undefined> {
    return await this.#server.clientKey()
  }

  /** The DPoP key's algorithm and thumbprint, in DPoP mode, for `check`. */
  get dpopKey (): { alg: string, thumbprint: string } | undefined {
    const key = this.#server.dpop
    return key === undefined ? undefined : { alg: key.alg, thumbprint: key.thumbprint }
  }

  /** Discovery, if configured and not done yet (the `check` command's first step). */
  async discover (): Promise<Endpoints | undefined> {
    try {
      return await this.#server.discover()
    } catch (err) {
      throw this.#scrubbed(err)
    }
  }

  /**
   * One grant with the configured credentials, now, without the retries
   * (the `check` command): discovery first if it has not run. The token is
   * held as after any grant. Throws a GrantError whose message is scrubbed.
   */
  async grantOnce (): Promise<{ grant: PrimaryGrant | 'token_exchange', tokenUrl: string, set: TokenSet }> {
    try {
      await this.#server.discover()
      const set = await this.#obtain()
      const grant = this.#o.exchange === undefined ? this.#server.grantType : 'token_exchange'
      this.#store(set, grant)
      return { grant, tokenUrl: this.#server.tokenUrl ?? '', set }
    } catch (err) {
      throw this.#scrubbed(err)
    }
  }

  async endSession (timeoutMs: number): Promise<LogoutResult> {
    // a grant stop() aborted may still have been answered: its session is the one to end
    await this.#inflight
    if (this.#o.exchange !== undefined) {
      this.#token = undefined
      return { outcome: 'skipped', detail: 'an exchanged token opens no session of its own: its subject credential\'s is ended' }
    }
    const late = this.#lateGrant
    const held = late !== undefined
      ? { refreshToken: late.refreshToken, accessToken: late.accessToken }
      : { refreshToken: this.#refresh?.token, accessToken: this.#token?.accessToken }
    this.#refresh = undefined
    this.#token = undefined
    this.#lateGrant = undefined
    const { outcome, detail } = await endSession(this.#server, held, timeoutMs, this.#clock, (text, max) => this.#secrets.shorten(text, max))
    const said = this.#secrets.scrub(detail)
    this.events.emit('logout', outcome)
    this.#o.log[outcome === 'success' || outcome === 'skipped' ? 'info' : 'warn']({ event: 'logout', outcome }, said)
    return { outcome, detail: said }
  }

  #scrubbed (err: unknown): GrantError {
    const e = err instanceof GrantError ? err : new GrantError(String(err), 'transient')
    return new GrantError(this.#secrets.scrub(e.message), e.kind, {
      ...(e.oauthError !== undefined && { oauthError: e.oauthError }),
      ...(e.status !== undefined && { status: e.status })
    })
  }

  #store (set: TokenSet, grant: GrantType): void {
    this.#secrets.addToken(set.accessToken)
    this.#secrets.addToken(set.refreshToken)
    if (this.#stopped) {
      this.#lateGrant = set
      return
    }
    const now = this.#clock.now()
    const replaced = this.#token
    this.#previous = replaced?.authorization.certificate !== undefined && replaced.authorization.certificate !== set.certificate ? replaced : undefined
    this.#token = { authorization: this.#authorizationFor(set.accessToken, set.certificate), accessToken: set.accessToken, receivedAt: now, lifetimeMs: set.expiresInMs, usableUntil: now + usableFor(set.expiresInMs) }
    // an exchanged token is renewed by a new exchange, never refreshed
    this.#refresh = set.refreshToken === undefined || this.#o.exchange !== undefined
      ? undefined
      : {
          token: set.refreshToken,
          usableUntil: set.refreshExpiresInMs === undefined ? undefined : now + usableFor(set.refreshExpiresInMs)
        }
    // A token obtained on schedule starts over: its first 401 renews it at once.
    if (this.#cause !== 'upstream_401') this.#rejections.reset()

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
    this.#waiters.resolve(this.#token.authorization)
    this.events.emit('token')
  }

  /** The header for a token, in DPoP mode the proofs that go with it, and the certificate it was obtained with. */
  #authorizationFor (accessToken: string, certificate: string | undefined): Authorization {
    const dpop = this.#server.dpop
    return {
      header: `${this.#server.scheme} ${accessToken}`,
      prove: dpop === undefined ? undefined : (method, url) => dpop.proof(method, url, { nonce: this.#upstreamNonce, accessToken }),
      ...(certificate !== undefined && { certificate })
    }
  }

  #failed (step: GrantType | 'discovery', err: unknown): void {
    const e = err instanceof GrantError ? err : new GrantError(String(err), 'transient')
    const rejected = e.kind === 'rejected'
    this.#lastFailureKind = classify(step, e)
    // What will not change by itself, and what may each time have taken the
    // credentials somewhere, is retried slowly: a refusal, a URL that is no
    // token endpoint, a client credential that cannot be used. An outage is
    // retried with backoff; so is an answer without a usable token (a
    // glitch, often), its backoff growing to the slow pace, since each such
    // answer may have opened a session.
    const slow = e.kind === 'credential' || (step !== 'discovery' && (rejected || e.kind === 'wrong_url'))
    const delay = slow
      ? slowRetryDelay(this.#o.rejectedRetryMs, this.#random())
      : backoffDelay({ minMs: this.#o.retryMinMs, maxMs: e.kind === 'unusable' ? this.#o.rejectedRetryMs : this.#o.retryMaxMs }, this.#failures, this.#random(), e.retryAfterMs)
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
    logFailure(this.#o.log, step, e, fields, e.message === this.#lastFailure)
    this.#lastFailure = e.message
    this.#o.log.debug({ event: fields.event, ...(step !== 'discovery' && { grant: step }), failure: e.kind, retryInMs: Math.round(delay) }, `${fields.event} request will be retried`)

    const retryAt = this.#clock.now() + delay
    this.#arm(retryAt, () => this.#renewNow())
    this.#retryAt = retryAt
    this.#waitingOnCredentials = rejected || e.kind === 'credential'
    this.#waiters.failBefore(retryAt)
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

/** Refused subject tokens remembered: a few renewals' worth. */
const MAX_REFUSED_SUBJECTS = 8

function secondsUntil (ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000))
}
