import type * as oauth from 'oauth4webapi'
import { DPOP_ALGORITHMS } from '../config/schema.js'
import type { DpopAlgorithm } from '../config/types.js'
import { DpopKey, dpopNonceOf, htuOf } from './dpop.js'
import { GrantError, oauthErrorOf, type Answer, type Shorten } from './grant.js'

/**
 * DPoP towards the auth server (AUTH_DPOP): the key, which discovery may
 * replace by one of an algorithm the server offers; oauth4webapi's handle
 * for it, which proves the grants and keeps their nonce; and the server's
 * newest nonce for the requests oauth4webapi does not prove itself (the
 * session's end), each sent once more when the server asks for one.
 */
export class AuthServerDpop {
  #key: DpopKey | undefined
  #handle: oauth.DPoPHandle | undefined
  #nonce: string | undefined

  /** `key`: undefined outside DPoP mode, where every method does nothing. */
  constructor (key: DpopKey | undefined) {
    this.#key = key
    this.#handle = key?.handle()
  }

  /** The key, in DPoP mode. */
  get key (): DpopKey | undefined {
    return this.#key
  }

  /** oauth4webapi's handle for the key, in DPoP mode. */
  get handle (): oauth.DPoPHandle | undefined {
    return this.#handle
  }

  /**
   * The DPoP algorithms the server offers (discovery's
   * dpop_signing_alg_values_supported): a key of another is a configuration
   * error when AUTH_DPOP_ALG named it (`algSet`), and otherwise gives way to
   * a new key of one the server offers, ES256 first: returns the algorithms
   * replaced and chosen then, for the caller to say.
   */
  async offered (offered: string[] | undefined, algSet: boolean, shorten: Shorten): Promise<{ was: string, chosen: DpopAlgorithm } | undefined> {
    const key = this.#key
    if (key === undefined || offered === undefined || offered.includes(key.alg)) return undefined
    const shown = shorten(offered.join(', '), 300)
    if (algSet) {
      throw new GrantError(`discovery: AUTH_DPOP_ALG=${key.alg} is not among the DPoP algorithms the auth server offers (dpop_signing_alg_values_supported: ${shown}): set AUTH_DPOP_ALG to one of them, or unset it`, 'rejected', { status: 200 })
    }
    const chosen = (DPOP_ALGORITHMS as readonly DpopAlgorithm[]).find((alg) => offered.includes(alg))
    if (chosen === undefined) {
      throw new GrantError(`discovery: the auth server offers DPoP with ${shown} only (dpop_signing_alg_values_supported), none of which AUTH_DPOP_ALG can be (${DPOP_ALGORITHMS.join(', ')})`, 'rejected', { status: 200 })
    }
    this.#key = await DpopKey.generate(chosen)
    this.#handle = this.#key.handle()
    return { was: key.alg, chosen }
  }

  /** A proof for a POST to `url`, with the server's newest nonce; undefined outside DPoP mode. */
  proof (url: string): string | undefined {
    return this.#key?.proof('POST', htuOf(url), { nonce: this.#nonce })
  }

  /** The server's newest nonce, for the proofs of the requests oauth4webapi does not prove itself (the session's end). */
  noteNonce (header: string | null | undefined): void {
    const nonce = dpopNonceOf(header ?? undefined)
    if (nonce !== undefined) this.#nonce = nonce
  }

  /** Sends once more, with the nonce, when the server asks for one (DPoP mode). */
  async provenOnce (send: () => Promise<Answer>): Promise<Answer> {
    const answer = await send()
    this.noteNonce(answer.dpopNonce)
    if (!this.#askedForNonce(answer)) return answer
    const again = await send()
    this.noteNonce(again.dpopNonce)
    return again
  }

  #askedForNonce (answer: Answer): boolean {
    return this.#key !== undefined && answer.status === 400 && dpopNonceOf(answer.dpopNonce) !== undefined && oauthErrorOf(answer.body).error === 'use_dpop_nonce'
  }
}
