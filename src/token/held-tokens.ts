import type { Authorization } from './credential.js'
import type { TokenSet } from './grant.js'
import { usableFor } from './schedule.js'
import type { HeldSession } from './session.js'

/** An access token as a credential holds it: what goes with a request, and until when it is handed out. */
export interface HeldToken {
  authorization: Authorization
  accessToken: string
  receivedAt: number
  lifetimeMs: number
  usableUntil: number
}

/** A refresh token held to renew by. */
export interface HeldRefresh {
  token: string
  /** undefined: it does not lapse on its own */
  usableUntil: number | undefined
}

/**
 * The tokens one credential holds, on its clock's time: the access token,
 * the one it replaced while that one is bound to another client certificate
 * (an upstream whose certificate files are renewed later still gets the
 * token that matches its connections), and the refresh token. It decides
 * nothing about when tokens are obtained: the lifecycle does.
 */
export class HeldTokens {
  #token: HeldToken | undefined
  /** the token #token replaced, kept while valid when it is bound to another client certificate */
  #previous: HeldToken | undefined
  #refresh: HeldRefresh | undefined

  /** The access token held, whether or not it is still handed out. */
  get token (): HeldToken | undefined {
    return this.#token
  }

  get refresh (): HeldRefresh | undefined {
    return this.#refresh
  }

  current (now: number): Authorization | undefined {
    const t = this.#token
    return t !== undefined && now < t.usableUntil ? t.authorization : undefined
  }

  boundTo (certificate: string, now: number): Authorization | undefined {
    for (const t of [this.#token, this.#previous]) {
      if (t !== undefined && t.authorization.certificate === certificate && now < t.usableUntil) return t.authorization
    }
    return undefined
  }

  expiresInSeconds (now: number): number {
    const t = this.#token
    if (t === undefined) return 0
    return Math.max(0, (t.receivedAt + t.lifetimeMs - now) / 1000)
  }

  /** Whether `refresh` may still be sent. */
  usable (refresh: HeldRefresh | undefined, now: number): refresh is HeldRefresh {
    return refresh !== undefined && (refresh.usableUntil === undefined || now < refresh.usableUntil)
  }

  /**
   * Holds the access token of `set`, received `now`, with its `authorization`,
   * and its refresh token when `refreshes` (a source that does not refresh,
   * an exchange, renews by a new grant).
   */
  store (set: TokenSet, authorization: Authorization, now: number, refreshes: boolean): HeldToken {
    const replaced = this.#token
    this.#previous = replaced?.authorization.certificate !== undefined && replaced.authorization.certificate !== set.certificate ? replaced : undefined
    this.#token = { authorization, accessToken: set.accessToken, receivedAt: now, lifetimeMs: set.expiresInMs, usableUntil: now + usableFor(set.expiresInMs) }
    this.#refresh = set.refreshToken === undefined || !refreshes
      ? undefined
      : {
          token: set.refreshToken,
          usableUntil: set.refreshExpiresInMs === undefined ? undefined : now + usableFor(set.refreshExpiresInMs)
        }
    return this.#token
  }

  /** Lets go of the access token (the upstream refused it); the one it replaced stays. */
  dropToken (): void {
    this.#token = undefined
  }

  /** Lets go of the refresh token (it may be bound to a certificate that was replaced). */
  dropRefresh (): void {
    this.#refresh = undefined
  }

  /** `spent` can no longer be used: let go of it, unless another has been held since. */
  refreshSpent (spent: HeldRefresh | undefined): void {
    if (this.#refresh === spent) this.#refresh = undefined
  }

  /** Lets go of everything, and says what was held: the session to end. */
  clear (): HeldSession {
    const held = { refreshToken: this.#refresh?.token, accessToken: this.#token?.accessToken }
    this.#refresh = undefined
    this.#token = undefined
    this.#previous = undefined
    return held
  }
}
