import { createHash, randomBytes } from 'node:crypto'
import { calculateJwkThumbprint, EmbeddedJWK, jwtVerify, type JWTPayload } from 'jose'

/**
 * A DPoP proof checked as a server must (RFC 9449 §4.3), with the nonce
 * (§8, §9) and the binding to an access token (§7.1): what the development
 * token server and the tests' strict resource server hold the sidecar to.
 */

export type ProofVerdict =
  | { ok: true, jkt: string, claims: JWTPayload }
  | { ok: false, error: 'invalid_dpop_proof' | 'use_dpop_nonce', description: string }

export interface ProofExpectations {
  method: string
  /** the URL the request reached, as the server sees it (its query is ignored) */
  url: string
  /** the access token the request carries: `ath` and the key's thumbprint are checked against it */
  accessToken?: string
  /** the token's `cnf.jkt` (RFC 9449 §6.1) */
  boundTo?: string
}

export interface DpopVerifierOptions {
  /** demand this server's nonce in every proof (rotated by rotateNonce()) */
  nonce?: boolean
  /** how far `iat` may be from the server's clock, seconds */
  skewSeconds?: number
}

const ALGORITHMS = ['ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519', 'RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512']

export class DpopVerifier {
  /** the nonce proofs must carry, when nonces are on */
  nonce: string | undefined
  readonly #skewSeconds: number
  /** jti values seen, with when they may be forgotten (ms) */
  readonly #seen = new Map<string, number>()

  constructor (options: DpopVerifierOptions = {}) {
    this.#skewSeconds = options.skewSeconds ?? 60
    if (options.nonce === true) this.rotateNonce()
  }

  /** A new nonce: proofs with the previous one are refused with use_dpop_nonce. */
  rotateNonce (): string {
    this.nonce = randomBytes(16).toString('base64url')
    return this.nonce
  }

  async verify (header: string | string[] | undefined, expected: ProofExpectations): Promise<ProofVerdict> {
    const refuse = (description: string): ProofVerdict => ({ ok: false, error: 'invalid_dpop_proof', description })
    // §4.3 1: exactly one DPoP header (Node joins repeated ones with commas)
    if (header === undefined) return refuse('no DPoP proof')
    if (typeof header !== 'string' || header.includes(',')) return refuse('more than one DPoP header')
    let claims: JWTPayload
    let jkt: string
    try {
      // §4.3 2-7: a JWT, typ dpop+jwt, an asymmetric algorithm, signed by
      // the public key in its header (jose's EmbeddedJWK refuses a private one)
      const verified = await jwtVerify(header, EmbeddedJWK, { typ: 'dpop+jwt', algorithms: ALGORITHMS })
      claims = verified.payload
      jkt = await calculateJwkThumbprint(verified.protectedHeader.jwk!)
    } catch (err) {
      return refuse(`the proof does not verify: ${(err as Error).message}`)
    }
    const { jti, htm, htu, iat } = claims as { jti?: unknown, htm?: unknown, htu?: unknown, iat?: unknown }
    if (typeof jti !== 'string' || jti === '' || typeof htm !== 'string' || typeof htu !== 'string' || typeof iat !== 'number') {
      return refuse('jti, htm, htu or iat is missing')
    }
    if (htm !== expected.method) return refuse(`htm ${htm} is not the request's method ${expected.method}`)
    if (normalized(htu) !== normalized(expected.url)) return refuse(`htu ${htu} is not the request's URL ${expected.url}`)
    if (this.nonce !== undefined && claims.nonce !== this.nonce) {
      return { ok: false, error: 'use_dpop_nonce', description: claims.nonce === undefined ? 'a nonce is required' : 'the nonce is stale' }
    }
    const now = Date.now() / 1000
    if (Math.abs(now - iat) > this.#skewSeconds) return refuse(`iat is ${Math.round(now - iat)} s from now`)
    if (expected.accessToken !== undefined) {
      const ath = createHash('sha256').update(expected.accessToken).digest('base64url')
      if (claims.ath !== ath) return refuse('ath is not the hash of the access token')
      if (expected.boundTo !== jkt) return refuse('the token is bound to another key')
    }
    this.#forgetOld()
    if (this.#seen.has(jti)) return refuse('the proof was used before (jti)')
    this.#seen.set(jti, Date.now() + 2 * this.#skewSeconds * 1000)
    return { ok: true, jkt, claims }
  }

  #forgetOld (): void {
    const now = Date.now()
    for (const [jti, until] of this.#seen) if (until < now) this.#seen.delete(jti)
  }
}

/** A URL as RFC 9449 §4.3 compares them: without query and fragment, after RFC 3986 normalization. */
function normalized (url: string): string {
  try {
    const u = new URL(url)
    return `${u.protocol}//${u.host}${u.pathname}`
  } catch {
    return `invalid: ${url}`
  }
}
