import { TokenUnavailableError } from '../errors.js'
import type { Logger } from '../logger.js'
import type { SecretScrubber } from '../secrets.js'
import { Alarm, systemClock, type Clock } from './clock.js'
import { credentialEvents, type Authorization, type Credential, type HeaderValue, type LogoutResult, type Verdict } from './credential.js'
import type { Endpoints } from './discovery.js'
import type { DpopKey } from './dpop.js'
import { inTheirNames } from '../config/names.js'
import { FailureStreak, logFailure, retryDelay } from './failures.js'
import { GrantError, type Step, type TokenSet } from './grant.js'
import { HeldTokens } from './held-tokens.js'
import { renewalDelay } from './schedule.js'
import type { GrantCounter, Obtained, TokenSource } from './source.js'
import { UpstreamAnswers } from './upstream-answers.js'
import { nextToken, Waiters } from './waiters.js'
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
  /** a named route's own AUTH_* variables, named so in what it says (CredentialConfig.setBy) */
  setBy?: Readonly<Record<string, string>>
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

/**
 * Keeps one access token fresh: a token at start, a renewal before it
 * expires (its refresh token kept for it, while it may be used), backoff
 * through outages, renewals driven by the upstream's 401s paced, and never
 * more than one grant request in flight; requests that arrive meanwhile
 * wait for it, bounded. How each token is obtained is its source's
 * (source.ts): it knows nothing of grants. What it holds is kept by
 * held-tokens.ts, and what the upstream's answers mean is judged by
 * upstream-answers.ts; this class decides when to obtain a token.
 */
export class TokenLifecycle implements Credential {
  readonly kind = 'oauth2'
  readonly events = credentialEvents()
  /** how its tokens are obtained: the auth server, the grants */
  readonly #source: TokenSource
  readonly #o: TokenLifecycleOptions
  readonly #clock: Clock
  readonly #random: () => number
  readonly #waiters: Waiters<Authorization>
  readonly #held = new HeldTokens()
  #inflight: Promise<void> | undefined
  /** why the renewal in flight was started */
  #cause: 'schedule' | 'upstream_401' = 'schedule'
  /** the renewal, or the retry after a failure */
  readonly #alarm: Alarm
  /** when the pending retry after a failure is due; undefined when not in backoff */
  #retryAt: number | undefined
  /** the last failure may pass when the source cues it (a credential file changed, the subject's token is new) */
  #waitingOnCue = false
  readonly #failures = new FailureStreak()
  #stopped = false
  /** a grant answered after stop(): never used, only its session ended */
  #lateGrant: TokenSet | undefined
  readonly #secrets: SecretScrubber
  readonly #tracing: Tracing
  /** what the upstream's answers said: its DPoP nonce, the 401s' renewals paced */
  readonly #upstream: UpstreamAnswers
  /** the refused token of this credential's whose renewal an exchange asked for: asked once per token */
  #renewalAskedFor: string | undefined

  constructor (options: TokenLifecycleOptions) {
    this.#o = options
    this.#source = options.source
    this.#secrets = options.secrets
    this.#tracing = options.tracing ?? NO_TRACING
    this.#clock = options.clock ?? systemClock
    this.#random = options.random ?? Math.random
    this.#alarm = new Alarm(this.#clock)
    this.#upstream = new UpstreamAnswers(this.events, options.log, this.#clock)
    this.#waiters = new Waiters(this.#clock, options.waitMs, () => this.#retryAfterSeconds())
  }

  start (): void {
    this.#source.onRetryCue(() => {
      if (!this.#waitingOnCue || this.#stopped || this.#inflight !== undefined) return
      this.#o.log.info({ event: 'token', grant: this.#source.grant }, this.#source.grant === 'token_exchange' ? 'the token to exchange was renewed: exchanging it now' : 'credential file changed: retrying the grant now')
      this.#renewNow()
    })
    // a token already held (`check`'s) is kept and renewed on its schedule
    if (this.#held.token === undefined) this.#renewNow()
  }

  stop (): void {
    this.#stopped = true
    this.#alarm.clear()
    this.#source.server.stop()
    this.#source.stop?.()
    this.#waiters.failBefore()
  }

  current (): Authorization | undefined {
    return this.#held.current(this.#clock.now())
  }

  ready (): boolean {
    return this.current() !== undefined
  }

  boundTo (certificate: string): Authorization | undefined {
    return this.#held.boundTo(certificate, this.#clock.now())
  }

  notReadyReason (): string | undefined {
    return this.ready() ? undefined : inTheirNames(this.#failures.notReadyText({ tokenUrl: this.#source.server.tokenUrl, discoveryUrl: this.#source.server.discoveryUrl }, (text) => this.#secrets.scrub(text)), this.#o.setBy)
  }

  expiresInSeconds (): number {
    return this.#held.expiresInSeconds(this.#clock.now())
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
    const held = this.#held.token?.authorization === authorization
    const verdict = this.#upstream.judge(status, challenge, nonce, { dpop: this.#source.server.dpop !== undefined, held })
    if (verdict !== 'renew') return verdict
    this.#held.dropToken()
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
      if (dropRefresh) this.#held.dropRefresh()
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
    this.#alarm.clear()
    this.#retryAt = undefined
    this.#waitingOnCue = false
    this.#cause = cause
    this.#inflight = this.#attempt().finally(() => { this.#inflight = undefined })
  }

  async #attempt (): Promise<void> {
    const refresh = this.#held.refresh
    try {
      const obtained = await this.#source.obtain({
        ...(this.#held.usable(refresh, this.#clock.now()) && { refresh: refresh.token }),
        refreshSpent: () => this.#held.refreshSpent(refresh),
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
    const held = this.#held.token!.accessToken
    if (!refused.has(held)) return held
    if (this.#renewalAskedFor !== held) {
      this.#renewalAskedFor = held
      this.#o.log.info({ event: 'token', reason: 'exchange_refused' }, 'an exchange refused the access token: renewing it, the current one still used meanwhile')
      this.#renewAfter()
    }
    const next = await nextToken(this.events, this.#clock, this.#o.waitMs, () => this.#held.token?.accessToken)
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
    const holding = this.#held.clear()
    const held = late !== undefined ? { refreshToken: late.refreshToken, accessToken: late.accessToken } : holding
    this.#lateGrant = undefined
    const ended = await this.#source.endSession(held, timeoutMs)
    if (ended === undefined) return { outcome: 'skipped', detail: 'an exchanged token opens no session of its own: its subject credential\'s is ended' }
    const { outcome, detail } = ended
    const said = inTheirNames(this.#secrets.scrub(detail), this.#o.setBy)
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
    const token = this.#held.store(set, this.#authorizationFor(set.accessToken, set.certificate), now, this.#source.refreshes)
    // A token obtained on schedule starts over: its first 401 renews it at once.
    if (this.#cause !== 'upstream_401') this.#upstream.reset()

    this.#o.log.info({
      event: 'token',
      grant,
      outcome: 'success',
      expiresIn: set.expiresInMs / 1000,
      refreshExpiresIn: set.refreshToken === undefined ? null : (set.refreshExpiresInMs ?? 0) / 1000,
      ...(this.#failures.count > 0 && { failedAttempts: this.#failures.count }),
      ...this.#tracing.grantIds(this)
    }, this.#failures.count > 0 ? 'token obtained after failed attempts' : 'token obtained')
    this.#failures.end()

    this.#alarm.set(now + renewalDelay(set.expiresInMs, this.#random()), () => this.#renewNow())
    this.#waiters.resolve(token.authorization)
    this.events.emit('token')
  }

  /** The header for a token, in DPoP mode the proofs that go with it, and the certificate it was obtained with. */
  #authorizationFor (accessToken: string, certificate: string | undefined): Authorization {
    const dpop = this.#source.server.dpop
    return {
      header: `${this.#source.server.scheme} ${accessToken}`,
      prove: dpop === undefined ? undefined : (method, url) => dpop.proof(method, url, { nonce: this.#upstream.nonce, accessToken }),
      ...(certificate !== undefined && { certificate })
    }
  }

  #failed (err: unknown): void {
    const e = err instanceof GrantError ? err : new GrantError(String(err), 'transient')
    const step: Step = e.step ?? this.#source.grant
    const rejected = e.kind === 'rejected'
    const delay = retryDelay(step, e, this.#failures.count, this.#o, this.#random())
    const repeated = this.#failures.add(step, e)

    const fields = {
      event: step === 'discovery' ? 'discovery' : 'token',
      ...(step !== 'discovery' && { grant: step }),
      outcome: rejected ? 'rejected' : 'error',
      reason: inTheirNames(this.#secrets.scrub(e.message), this.#o.setBy),
      attempt: this.#failures.count,
      retryInMs: Math.round(delay),
      tokenValid: this.current() !== undefined,
      // a failure before any grant was sent (discovery's) has none of its own
      ...(step !== 'discovery' && this.#tracing.grantIds(this))
    }
    logFailure(this.#o.log, step, e, fields, repeated, (text) => inTheirNames(text, this.#o.setBy))
    this.#o.log.debug({ event: fields.event, ...(step !== 'discovery' && { grant: step }), failure: e.kind, retryInMs: Math.round(delay) }, `${fields.event} request will be retried`)

    const retryAt = this.#clock.now() + delay
    this.#alarm.set(retryAt, () => this.#renewNow())
    this.#retryAt = retryAt
    this.#waitingOnCue = rejected || e.kind === 'credential'
    this.#waiters.failBefore(retryAt)
  }

  #retryAfterSeconds (): number {
    return this.#retryAt === undefined ? 1 : secondsUntil(this.#retryAt - this.#clock.now())
  }
}

function secondsUntil (ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000))
}
