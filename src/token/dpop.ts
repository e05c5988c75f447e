import { constants, createHash, KeyObject, randomUUID, sign, webcrypto } from 'node:crypto'
import { calculateJwkThumbprint, type JWK } from 'jose'
import * as oauth from 'oauth4webapi'
import type { DpopAlgorithm } from '../config/types.js'

/** node:crypto's name of the digest and its signature options, per algorithm. */
const SIGNING: Record<DpopAlgorithm, { digest: string | null, options: object }> = {
  ES256: { digest: 'sha256', options: { dsaEncoding: 'ieee-p1363' } },
  EdDSA: { digest: null, options: {} },
  RS256: { digest: 'sha256', options: {} },
  PS256: { digest: 'sha256', options: { padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: 32 } }
}

/** WebCrypto's parameters for making a key pair of each algorithm. */
const GENERATE: Record<DpopAlgorithm, webcrypto.EcKeyGenParams | webcrypto.RsaHashedKeyGenParams | webcrypto.Algorithm> = {
  ES256: { name: 'ECDSA', namedCurve: 'P-256' },
  EdDSA: { name: 'Ed25519' },
  RS256: { name: 'RSASSA-PKCS1-v1_5', modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: 'SHA-256' },
  PS256: { name: 'RSA-PSS', modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: 'SHA-256' }
}

/**
 * The sidecar's DPoP key pair (RFC 9449), made at start and kept in memory
 * only. oauth4webapi proves the token requests with it (`handle`); the
 * proofs of proxied requests, one per request, are signed here with
 * node:crypto, synchronously, at half the CPU of WebCrypto's signing (`npm
 * run bench` measures both), in the request's own turn. The tests verify
 * every kind of proof with jose.
 */
export class DpopKey {
  readonly alg: DpopAlgorithm
  /** the RFC 7638 thumbprint of the public key: what a bound token's `cnf.jkt` names */
  readonly thumbprint: string
  /** the pair as oauth4webapi takes it; the private key cannot be exported */
  readonly keyPair: webcrypto.CryptoKeyPair
  readonly #privateKey: KeyObject
  readonly #encodedHeader: string
  /** the last access token's `ath`, computed once per token */
  #ath: { token: string, value: string } | undefined

  private constructor (alg: DpopAlgorithm, keyPair: webcrypto.CryptoKeyPair, encodedHeader: string, thumbprint: string) {
    this.alg = alg
    this.keyPair = keyPair
    this.#privateKey = KeyObject.from(keyPair.privateKey)
    this.#encodedHeader = encodedHeader
    this.thumbprint = thumbprint
  }

  static async generate (alg: DpopAlgorithm): Promise<DpopKey> {
    const keyPair = await webcrypto.subtle.generateKey(GENERATE[alg], false, ['sign', 'verify']) as webcrypto.CryptoKeyPair
    const { kty, crv, x, y, n, e } = await webcrypto.subtle.exportKey('jwk', keyPair.publicKey)
    const jwk = Object.fromEntries(Object.entries({ kty, crv, x, y, n, e }).filter(([, v]) => v !== undefined)) as JWK
    const header = Buffer.from(JSON.stringify({ typ: 'dpop+jwt', alg, jwk })).toString('base64url')
    return new DpopKey(alg, keyPair, header, await calculateJwkThumbprint(jwk))
  }

  /** oauth4webapi's DPoP handle for this key: it proves token requests and keeps the server's nonce. */
  handle (): oauth.DPoPHandle {
    // oauth4webapi names an Ed25519 key's algorithm Ed25519; the proofs say EdDSA, as Keycloak expects
    return oauth.DPoP({}, this.keyPair, { [oauth.modifyAssertion]: (header) => { header.alg = this.alg } })
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
