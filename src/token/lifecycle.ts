import { EventEmitter } from 'node:events'
import { TokenUnavailableError } from '../errors.js'
import type { Logger } from '../logger.js'
import type { SecretScrubber } from '../secrets.js'
import { dpopRefusalOf, refusesScope } from './challenge.js'
import { MAX_TIMER_MS, systemClock, type Clock } from './clock.js'
import type { Authorization, Credential, CredentialEvents, HeaderValue, LogoutResult, Verdict } from './credential.js'
import type { Endpoints } from './discovery.js'
import { dpopNonceOf, type DpopKey } from './dpop.js'
import { classify, logFailure, notReadyText, type FailureClass } from './failures.js'
import { GrantError, type Step, type TokenSet } from './grant.js'
import { RejectionBackoff } from './rejection-backoff.js'
import { backoffDelay, renewalDelay, slowRetryDelay, usableFor } from './schedule.js'
import type { GrantCounter, Obtained, TokenSource } from './source.js'
import { Waiters } from './waiters.js'
import { NO_GRANT_SPAN, NO_TRACING, type Tracing } from '../tracing/tracing.js'

export interface TokenLifecycleOptions {
  /** how its tokens are obtained */
  source: TokenSource
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
  /** a span for each grant; none by default */
  tracing?: Tracing
  /** the route whose settings define the credential, for the spans */
  route?: string
}

/** One grant made now, as `check` shows it. */
export interface GrantReport extends Obtained {
  tokenUrl: string
  /** the key the client authenticated with (private_key_jwt); undefined for a secret or none */
  clientKey: { alg: string, kid: string } | undefined
  /** the DPoP key the token is bound to; undefined without DPoP */
  proofKey: DpopKey | undefined
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
 * Keeps one access token fresh: a token at start, a renewal before it
 * expires (its refresh token kept for it, while it may be used), backoff
 * through outages, renewals driven by the upstream's 401s paced, and never
 * more than one grant request in flight; requests that arrive meanwhile
 * wait for it, bounded. How each token is obtained is its source's
 * (source.ts): it knows nothing of grants.
 */
export class TokenLifecycle implements Credential {
  readonly kind = 'oauth2'
  readonly events = new EventEmitter<CredentialEvents>()
  /** how its tokens are obtained: the auth server, the grants */
  readonly #source: TokenSource
  readonly #o: TokenLifecycleOptions
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
  /** the last failure may pass when the source cues it (a credential file changed, the subject's token is new) */
  #waitingOnCue = false
  #failures = 0
  #lastFailure = ''
  /** what the last failed grant ran into, for readiness */
  #lastFailureKind: FailureClass | undefined
  #stopped = false
  /** a grant answered after stop(): never used, only its session ended */
  #lateGrant: TokenSet | undefined
  readonly #secrets: SecretScrubber
  readonly #tracing: Tracing
  /** renewals caused by upstream 401s, paced */
  readonly #rejections = new RejectionBackoff()
  /** the upstream's newest DPoP nonce */
  #upstreamNonce: string | undefined
  /** the refused token of this credential's whose renewal an exchange asked for: asked once per token */
  #renewalAskedFor: string | undefined

  constructor (options: TokenLifecycleOptions) {
    this.#o = options
    this.#source = options.source
    this.#secrets = options.secrets
    this.#tracing = options.tracing ?? NO_TRACING
    this.#clock = options.clock ?? systemClock
    this.#random = options.random ?? Math.random
    this.#waiters = new Waiters(this.#clock, options.waitMs, () => this.#retryAfterSeconds())
  }

  start (): void {
    this.#source.onRetryCue(() => {
      if (!this.#waitingOnCue || this.#stopped || this.#inflight !== undefined) return
      this.#o.log.info({ event: 'token', grant: this.#source.grant }, this.#source.grant === 'token_exchange' ? 'the token to exchange was renewed: exchanging it now' : 'credential file changed: retrying the grant now')
      this.#renewNow()
    })
    // a token already held (`check`'s) is kept and renewed on its schedule
    if (this.#token === undefined) this.#renewNow()
  }

  stop (): void {
    this.#stopped = true
    this.#clock.clearTimeout(this.#timer)
    this.#source.server.stop()
    this.#source.stop?.()
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
    return this.ready() ? undefined : notReadyText(this.#lastFailureKind, { tokenUrl: this.#source.server.tokenUrl, discoveryUrl: this.#source.server.discoveryUrl }, this.#secrets.scrub(this.#lastFailure))
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
    if (nonce !== undefined && this.#source.server.dpop !== undefined) this.#upstreamNonce = dpopNonceOf(nonce) ?? this.#upstreamNonce
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
   * obtained with the new certificate when the source says (at once, or
   * an exchanged one once the token it comes from is new). The current one
   * serves until it comes.
   */
  certificateChanged (): void {
    if (this.#stopped) return
    this.#source.certificateChanged((dropRefresh) => {
      if (this.#stopped) return
      if (dropRefresh) this.#refresh = undefined
      this.#renewAfter()
    })
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
    this.#waitingOnCue = false
    this.#cause = cause
    this.#inflight = this.#attempt().finally(() => { this.#inflight = undefined })
  }

  async #attempt (): Promise<void> {
    const refresh = this.#refresh
    const usable = refresh !== undefined && (refresh.usableUntil === undefined || this.#clock.now() < refresh.usableUntil)
    try {
      const obtained = await this.#source.obtain({
        ...(usable && { refresh: refresh.token }),
        refreshSpent: () => { if (this.#refresh === refresh) this.#refresh = undefined },
        count: this.#counted
      })
      this.#store(obtained)
    } catch (err) {
      if (this.#stopped) return
      this.#failed(err)
    }
  }

  /** One grant sent, in its span; its outcome told to whoever counts them. */
  readonly #counted: GrantCounter = async (grant, send) => {
    const span = this.#tracing.grant(this, this.#o.route ?? 'default', grant)
    try {
      const set = await send(span)
      span.end('success')
      this.events.emit('grant', grant, 'success')
      return set
    } catch (err) {
      const rejected = err instanceof GrantError && err.kind === 'rejected'
      span.end(rejected ? 'rejected' : 'error', rejected ? err.oauthError : undefined)
      this.events.emit('grant', grant, rejected ? 'rejected' : 'error')
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

  /** The DPoP key its tokens are bound to (its algorithm and thumbprint); undefined without DPoP. */
  get proofKey (): DpopKey | undefined {
    return this.#source.server.dpop
  }

  /** The auth server's endpoints, from its discovery document; undefined when AUTH_TOKEN_URL is all there is. */
  async endpoints (): Promise<Endpoints | undefined> {
    return await this.#source.server.discover()
  }

  /**
   * One grant now, outside the schedule (`check`'s): its token serves
   * requests and is renewed on its schedule once started; resolves with
   * what was obtained, where, and how the client authenticated.
   */
  async grantNow (): Promise<GrantReport> {
    const obtained = await this.#source.obtain({ count: async (_grant, send) => await send(NO_GRANT_SPAN) })
    this.#store(obtained)
    return { ...obtained, tokenUrl: this.#source.server.tokenUrl ?? '', clientKey: await this.#source.server.clientKey(), proofKey: this.#source.server.dpop }
  }

  async endSession (timeoutMs: number): Promise<LogoutResult> {
    // a grant stop() aborted may still have been answered: its session is the one to end
    await this.#inflight
    const late = this.#lateGrant
    const held = late !== undefined
      ? { refreshToken: late.refreshToken, accessToken: late.accessToken }
      : { refreshToken: this.#refresh?.token, accessToken: this.#token?.accessToken }
    this.#refresh = undefined
    this.#token = undefined
    this.#previous = undefined
    this.#lateGrant = undefined
    const ended = await this.#source.endSession(held, timeoutMs)
    if (ended === undefined) return { outcome: 'skipped', detail: 'an exchanged token opens no session of its own: its subject credential\'s is ended' }
    const { outcome, detail } = ended
    const said = this.#secrets.scrub(detail)
    this.events.emit('logout', outcome)
    this.#o.log[outcome === 'success' || outcome === 'skipped' ? 'info' : 'warn']({ event: 'logout', outcome }, said)
    return { outcome, detail: said }
  }

  #store ({ set, grant }: Obtained): void {
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
    // a source that does not refresh (an exchange) renews by a new grant
    this.#refresh = set.refreshToken === undefined || !this.#source.refreshes
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
      ...(this.#failures > 0 && { failedAttempts: this.#failures }),
      ...this.#tracing.grantIds(this)
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
    const dpop = this.#source.server.dpop
    return {
      header: `${this.#source.server.scheme} ${accessToken}`,
      prove: dpop === undefined ? undefined : (method, url) => dpop.proof(method, url, { nonce: this.#upstreamNonce, accessToken }),
      ...(certificate !== undefined && { certificate })
    }
  }

  #failed (err: unknown): void {
    const e = err instanceof GrantError ? err : new GrantError(String(err), 'transient')
    const step: Step = e.step ?? this.#source.grant
    const rejected = e.kind === 'rejected'
    this.#lastFailureKind = classify(step, e)
    // What will not change by itself, and what may each time have taken the
    // credentials somewhere, is retried slowly: a refusal (the server's, or
    // its metadata's of the configuration), a URL that is no token endpoint,
    // a client credential that cannot be used. An outage is
    // retried with backoff; so is an answer without a usable token (a
    // glitch, often), its backoff growing to the slow pace, since each such
    // answer may have opened a session.
    const slow = e.kind === 'credential' || rejected || (step !== 'discovery' && e.kind === 'wrong_url')
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
      tokenValid: this.current() !== undefined,
      // a failure before any grant was sent (discovery's) has none of its own
      ...(step !== 'discovery' && this.#tracing.grantIds(this))
    }
    logFailure(this.#o.log, step, e, fields, e.message === this.#lastFailure)
    this.#lastFailure = e.message
    this.#o.log.debug({ event: fields.event, ...(step !== 'discovery' && { grant: step }), failure: e.kind, retryInMs: Math.round(delay) }, `${fields.event} request will be retried`)

    const retryAt = this.#clock.now() + delay
    this.#arm(retryAt, () => this.#renewNow())
    this.#retryAt = retryAt
    this.#waitingOnCue = rejected || e.kind === 'credential'
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

function secondsUntil (ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000))
}
