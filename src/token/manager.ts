import { TokenUnavailableError } from '../errors.js'
import type { Logger } from '../logger.js'
import type { SecretScrubber } from '../secrets.js'
import type { AuthServer } from './auth-server.js'
import { MAX_TIMER_MS, systemClock, type Clock } from './clock.js'
import type { Endpoints } from './discovery.js'
import { dpopNonceOf } from './dpop.js'
import { classify, logFailure, notReadyText, type FailureClass } from './failures.js'
import { GrantError, type GrantType, type TokenSet } from './grant.js'
import { RejectionBackoff } from './rejection-backoff.js'
import { backoffDelay, renewalDelay, slowRetryDelay, usableFor } from './schedule.js'
import { endSession } from './session.js'
import type { AuthorizationSource, LogoutResult, TokenEvents } from './source.js'
import type { PrimaryGrant } from '../config/load.js'

export interface TokenManagerOptions {
  server: AuthServer
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
  onLogout?: TokenEvents['onLogout']
  /** replaces known secret values in texts before they are logged */
  secrets: SecretScrubber
}

interface HeldToken {
  header: string
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

interface Waiter {
  resolve: (header: string) => void
  reject: (err: Error) => void
  deadline: number
  timer: unknown
}

/**
 * Keeps one access token fresh: the password grant at start, the refresh
 * grant before expiry, the password grant again when the refresh token
 * lapses or is refused, backoff through outages, and never more than one
 * grant request in flight.
 */
export class TokenManager implements AuthorizationSource {
  readonly #o: TokenManagerOptions
  readonly #server: AuthServer
  readonly #clock: Clock
  readonly #random: () => number
  #token: HeldToken | undefined
  #refresh: HeldRefresh | undefined
  #inflight: Promise<void> | undefined
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
  readonly #waiters = new Set<Waiter>()
  readonly #secrets: SecretScrubber
  /** renewals caused by upstream 401s with no other upstream answer in between */
  readonly #rejections = new RejectionBackoff()
  /** the upstream's newest DPoP nonce */
  #upstreamNonce: string | undefined

  constructor (options: TokenManagerOptions) {
    this.#o = options
    this.#server = options.server
    this.#secrets = options.secrets
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
    this.#server.stop()
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
    return this.ready() ? undefined : notReadyText(this.#lastFailureKind, { tokenUrl: this.#server.tokenUrl, issuerUrl: this.#server.issuerUrl })
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
    const { waitMs, inARow, first } = this.#rejections.take(this.#clock.now())
    if (waitMs > 0) {
      // the 401 is relayed and the token kept
      if (first) this.#o.log.warn({ event: 'token', reason: 'upstream_401', renewalsInARow: inARow, nextRenewalInMs: Math.round(waitMs) }, 'upstream rejects new tokens too: keeping the token, the next renewal on a 401 waits')
      return false
    }
    this.#token = undefined
    this.#o.log.warn({ event: 'token', reason: 'upstream_401' }, 'upstream rejected the access token: obtaining a new one')
    this.#renewNow()
    return true
  }

  accepted (): void {
    this.#rejections.reset()
  }

  proof (header: string, method: string, url: string): string | undefined {
    const dpop = this.#server.dpop
    if (dpop === undefined) return undefined
    return dpop.proof(method, url, { nonce: this.#upstreamNonce, accessToken: header.slice(header.indexOf(' ') + 1) })
  }

  upstreamNonce (header: string | string[] | number | undefined): void {
    if (header === undefined || this.#server.dpop === undefined) return
    const nonce = dpopNonceOf(header)
    if (nonce !== undefined) this.#upstreamNonce = nonce
  }

  #renewNow (): void {
    if (this.#inflight !== undefined || this.#stopped) return
    this.#clock.clearTimeout(this.#timer)
    this.#retryAt = undefined
    this.#waitingOnCredentials = false
    this.#inflight = this.#attempt().finally(() => { this.#inflight = undefined })
  }

  async #attempt (): Promise<void> {
    const primary = this.#server.grantType
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
          set = await this.#server.refreshGrant(refresh.token)
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
        set = await this.#server.primaryGrant()
      }
      this.#store(set, step as GrantType)
    } catch (err) {
      if (this.#stopped) return
      this.#failed(step, err)
    }
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
  async grantOnce (): Promise<{ grant: PrimaryGrant, tokenUrl: string, set: TokenSet }> {
    try {
      await this.#server.discover()
      const set = await this.#server.primaryGrant()
      this.#store(set, this.#server.grantType)
      return { grant: this.#server.grantType, tokenUrl: this.#server.tokenUrl ?? '', set }
    } catch (err) {
      throw this.#scrubbed(err)
    }
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
    this.#lateGrant = undefined
    const { outcome, detail } = await endSession(this.#server, held, timeoutMs, this.#clock)
    const said = this.#secrets.scrub(detail)
    this.#o.onLogout?.(outcome)
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
    const header = `${this.#server.scheme} ${set.accessToken}`
    this.#token = { header, accessToken: set.accessToken, receivedAt: now, lifetimeMs: set.expiresInMs, usableUntil: now + usableFor(set.expiresInMs) }
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
    const rejected = e.kind === 'rejected'
    this.#lastFailureKind = classify(step, e)
    // What will not change by itself, and what may each time have taken the
    // credentials somewhere or opened a session, is retried slowly: a
    // refusal, an answer without a usable token, a URL that is no token
    // endpoint. An outage is retried with backoff.
    const slow = step !== 'discovery' && e.kind !== 'transient'
    const delay = slow
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
    logFailure(this.#o.log, step, e, fields, e.message === this.#lastFailure)
    this.#lastFailure = e.message
    this.#o.log.debug({ event: fields.event, ...(step !== 'discovery' && { grant: step }), failure: e.kind, retryInMs: Math.round(delay) }, `${fields.event} request will be retried`)

    const retryAt = this.#clock.now() + delay
    this.#arm(retryAt, () => this.#renewNow())
    this.#retryAt = retryAt
    this.#waitingOnCredentials = rejected || e.kind === 'credential'
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
