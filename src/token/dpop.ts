import { constants, createHash, generateKeyPairSync, randomUUID, sign, type KeyObject } from 'node:crypto'
import { calculateJwkThumbprint, exportJWK } from 'jose'
import type { DpopAlgorithm } from '../config/types.js'

/** node:crypto's name of the digest and its signature options, per algorithm. */
const SIGNING: Record<DpopAlgorithm, { digest: string | null, options: object }> = {
  ES256: { digest: 'sha256', options: { dsaEncoding: 'ieee-p1363' } },
  EdDSA: { digest: null, options: {} },
  RS256: { digest: 'sha256', options: {} },
  PS256: { digest: 'sha256', options: { padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: 32 } }
}

/**
 * The sidecar's DPoP key pair (RFC 9449), made at start and kept in memory
 * only, and the proofs it signs: one per request, for exactly its method and
 * URL, with `ath` once there is an access token.
 *
 * A proof is made for every proxied request, so it is signed here with
 * node:crypto, synchronously, at half the CPU of jose's WebCrypto signing
 * (`npm run bench` measures both), and in the dispatcher's own turn. The key's
 * JWK and thumbprint come from jose; the tests verify every kind of proof
 * with jose.
 */
export class DpopKey {
  readonly alg: DpopAlgorithm
  /** the RFC 7638 thumbprint of the public key: what a bound token's `cnf.jkt` names */
  readonly thumbprint: string
  readonly #privateKey: KeyObject
  readonly #encodedHeader: string
  /** the last access token's `ath`, computed once per token */
  #ath: { token: string, value: string } | undefined

  private constructor (alg: DpopAlgorithm, privateKey: KeyObject, encodedHeader: string, thumbprint: string) {
    this.alg = alg
    this.#privateKey = privateKey
    this.#encodedHeader = encodedHeader
    this.thumbprint = thumbprint
  }

  static async generate (alg: DpopAlgorithm): Promise<DpopKey> {
    const { privateKey, publicKey } = alg === 'ES256'
      ? generateKeyPairSync('ec', { namedCurve: 'P-256' })
      : alg === 'EdDSA' ? generateKeyPairSync('ed25519') : generateKeyPairSync('rsa', { modulusLength: 2048 })
    const jwk = await exportJWK(publicKey)
    const header = Buffer.from(JSON.stringify({ typ: 'dpop+jwt', alg, jwk })).toString('base64url')
    return new DpopKey(alg, privateKey, header, await calculateJwkThumbprint(jwk))
  }

  /**
   * A fresh proof for one request: `htm` the method, `htu` the URL without
   * query or fragment, `nonce` the server's newest, `accessToken` for `ath`.
   */
  proof (htm: string, htu: string, options: { nonce?: string | undefined, accessToken?: string | undefined } = {}): string {
    const claims: Record<string, string | number> = { jti: randomUUID(), htm, htu, iat: Math.floor(Date.now() / 1000) }
    if (options.nonce !== undefined) claims.nonce = options.nonce
    if (options.accessToken !== undefined) claims.ath = this.#athOf(options.accessToken)
    const input = `${this.#encodedHeader}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`
    const { digest, options: signing } = SIGNING[this.alg]
    return `${input}.${sign(digest, Buffer.from(input), { key: this.#privateKey, ...signing }).toString('base64url')}`
  }

  #athOf (token: string): string {
    if (this.#ath?.token !== token) this.#ath = { token, value: createHash('sha256').update(token).digest('base64url') }
    return this.#ath.value
  }
}

/** A URL as a proof's `htu` names it: scheme, host and path; no query, no fragment. */
export function htuOf (url: string): string {
  const u = new URL(url)
  return `${u.protocol}//${u.host}${u.pathname}`
}

/** A nonce as RFC 9449 §8.1 allows one (NQCHAR), and short enough to go in every proof. */
const NONCE = /^[\x21\x23-\x5B\x5D-\x7E]{1,512}$/

/** The `DPoP-Nonce` header's value when it is a valid nonce. */
export function dpopNonceOf (header: string | string[] | number | undefined): string | undefined {
  return typeof header === 'string' && NONCE.test(header) ? header : undefined
}
