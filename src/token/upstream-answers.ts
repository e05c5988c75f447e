import type { EventEmitter } from 'node:events'
import type { Logger } from '../logger.js'
import { dpopRefusalOf, refusesScope } from './challenge.js'
import type { Clock } from './clock.js'
import type { CredentialEvents, HeaderValue, Verdict } from './credential.js'
import { dpopNonceOf } from './dpop.js'
import { RejectionBackoff } from './rejection-backoff.js'

/** What an upstream's answer means for its request; `renew`: the token itself was refused, and a new one may be obtained now. */
export type Judgement = Verdict | 'renew'

/**
 * What the upstream's answers tell a credential: the DPoP nonce its proofs
 * are to carry, and, for a 401, whether the token itself was refused. A
 * refused proof or a missing scope renews nothing; renewals that 401s cause
 * are paced (rejection-backoff.ts), so that an upstream refusing every new
 * token cannot drive a grant per request.
 */
export class UpstreamAnswers {
  readonly #events: EventEmitter<CredentialEvents>
  readonly #log: Logger
  readonly #clock: Pick<Clock, 'now'>
  readonly #rejections = new RejectionBackoff()
  #nonce: string | undefined

  constructor (events: EventEmitter<CredentialEvents>, log: Logger, clock: Pick<Clock, 'now'>) {
    this.#events = events
    this.#log = log
    this.#clock = clock
  }

  /** The upstream's newest DPoP nonce. */
  get nonce (): string | undefined {
    return this.#nonce
  }

  /**
   * The upstream answered `status`, with these `WWW-Authenticate` and
   * `DPoP-Nonce` headers, to a request whose token is the one held
   * (`held`) or one already replaced; `dpop`: the credential proves its
   * requests.
   */
  judge (status: number, challenge: HeaderValue, nonce: HeaderValue, o: { dpop: boolean, held: boolean }): Judgement {
    if (nonce !== undefined && o.dpop) this.#nonce = dpopNonceOf(nonce) ?? this.#nonce
    if (status !== 401) return 'relay'
    const refusal = dpopRefusalOf(challenge)
    if (refusal !== undefined) {
      // the proof was refused, not the token: asked for a nonce, the request may go once more with it
      this.#events.emit('dpop_refused', refusal)
      return refusal === 'use_dpop_nonce' ? 'replay' : 'relay'
    }
    // the token is fine but lacks a scope: a new one would lack it too
    if (refusesScope(challenge)) return 'relay'
    if (!o.held) return 'renewed' // already replaced: one renewal per rejected token
    const { waitMs, inARow, first } = this.#rejections.take(this.#clock.now())
    if (waitMs > 0) {
      // the 401 is relayed and the token kept
      if (first) this.#log.warn({ event: 'token', reason: 'upstream_401', renewalsInARow: inARow, nextRenewalInMs: Math.round(waitMs) }, 'upstream rejects new tokens too: keeping the token, the next renewal on a 401 waits')
      return 'relay'
    }
    return 'renew'
  }

  /** A token obtained on schedule starts over: its first 401 renews it at once. */
  reset (): void {
    this.#rejections.reset()
  }
}
