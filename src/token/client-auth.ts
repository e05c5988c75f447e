import { createPublicKey, randomUUID } from 'node:crypto'
import { calculateJwkThumbprint, decodeJwt, exportJWK, SignJWT } from 'jose'
import { parseClientKey, type KeyAlgorithm } from '../config/client-key.js'
import type { Credentials } from '../config/credentials.js'
import type { ClientAuth } from '../config/load.js'
import { GrantError } from './grant.js'

export const CLIENT_ASSERTION_TYPE = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'
/** How long a signed assertion is valid: it is made for one request. */
const ASSERTION_LIFETIME_S = 60

type SigningKey = Parameters<SignJWT['sign']>[0]

/** A parsed client key, kept for as long as the key file's text is the same. */
interface HeldKey { text: string, key: SigningKey, alg: KeyAlgorithm, kid: string }

/** The client's part of one request to the auth server. */
export interface ClientProof {
  fields: Array<[string, string]>
  /** client_secret_basic's header */
  authorization?: string
  /** what in it is secret, for the scrubber */
  secrets: string[]
}

export interface ClientAuthOptions {
  clientId: string
  clientAuth: ClientAuth
  keyAlg?: KeyAlgorithm
  keyId?: string
  /** wall-clock seconds, for `iat` and `exp` (tests move it) */
  nowSeconds?: () => number
}

/**
 * How the client proves itself on every request (the grants, the refresh,
 * the session ending), with the credentials as they are at that moment: a
 * rotated key or a new projected token is used from the next request on.
 * - client_secret_post / _basic: the secret in the form or in a Basic header;
 * - private_key_jwt / client_secret_jwt: a fresh assertion per request
 *   (RFC 7523: iss = sub = the client id, aud = the token endpoint, a
 *   unique jti, exp 60 s after iat), signed with the key or, HS256, the secret;
 * - federated_jwt: the JWT someone else issued, sent as it is, unless it has
 *   expired.
 */
export class ClientAuthenticator {
  readonly #o: ClientAuthOptions
  #key: HeldKey | undefined

  constructor (options: ClientAuthOptions) {
    this.#o = options
  }

  get mode (): ClientAuth {
    return this.#o.clientAuth
  }

  /** The client's fields (or header) for a request to `audience`, the token endpoint. */
  async prove (creds: Credentials, audience: string): Promise<ClientProof> {
    const { clientId, clientAuth } = this.#o
    const secret = creds.clientSecret
    switch (clientAuth) {
      case 'client_secret_basic': {
        if (secret === undefined) return { fields: [['client_id', clientId]], secrets: [] }
        // RFC 6749 §2.3.1: each part form-urlencoded, then Base64'd; the
        // client is identified by the header alone (credentials in both
        // places are refused by some servers).
        const encoded = Buffer.from(`${formEncode(clientId)}:${formEncode(secret)}`, 'utf8').toString('base64')
        return { fields: [], authorization: `Basic ${encoded}`, secrets: [secret, encoded] }
      }
      case 'private_key_jwt': {
        const key = await this.#signingKey(creds.clientKey ?? '')
        const assertion = await this.#assertion(audience, key.alg, key.key, key.kid)
        return this.#assertionFields(assertion)
      }
      case 'client_secret_jwt': {
        const assertion = await this.#assertion(audience, 'HS256', new TextEncoder().encode(secret ?? ''))
        return { ...this.#assertionFields(assertion), secrets: [assertion, ...(secret === undefined ? [] : [secret])] }
      }
      case 'federated_jwt':
        return this.#assertionFields(this.#federated(creds.clientAssertion ?? ''))
      default:
        return { fields: [['client_id', clientId], ...(secret === undefined ? [] : [['client_secret', secret] as [string, string]])], secrets: secret === undefined ? [] : [secret] }
    }
  }

  /** The key's algorithm and kid as assertions carry them (the `check` command says them). */
  async keyDescription (creds: Credentials): Promise<{ alg: KeyAlgorithm, kid: string } | undefined> {
    if (this.#o.clientAuth !== 'private_key_jwt') return undefined
    const { alg, kid } = await this.#signingKey(creds.clientKey ?? '')
    return { alg, kid }
  }

  #assertionFields (assertion: string): ClientProof {
    return {
      fields: [['client_id', this.#o.clientId], ['client_assertion_type', CLIENT_ASSERTION_TYPE], ['client_assertion', assertion]],
      secrets: [assertion]
    }
  }

  async #assertion (audience: string, alg: string, key: SigningKey, kid?: string): Promise<string> {
    const now = Math.floor(this.#o.nowSeconds?.() ?? Date.now() / 1000)
    return await new SignJWT({})
      .setProtectedHeader({ alg, typ: 'JWT', ...(kid !== undefined && { kid }) })
      .setIssuer(this.#o.clientId)
      .setSubject(this.#o.clientId)
      .setAudience(audience)
      .setJti(randomUUID())
      .setIssuedAt(now)
      .setExpirationTime(now + ASSERTION_LIFETIME_S)
      .sign(key)
  }

  async #signingKey (text: string): Promise<HeldKey> {
    if (this.#key?.text === text) return this.#key
    let parsed
    try {
      parsed = parseClientKey(text, this.#o.keyAlg)
    } catch (err) {
      throw new GrantError(`AUTH_CLIENT_KEY_FILE holds ${(err as Error).message}`, 'credential')
    }
    const kid = this.#o.keyId ?? await calculateJwkThumbprint(await exportJWK(createPublicKey(parsed.key)))
    this.#key = { text, key: parsed.key, alg: parsed.alg, kid }
    return this.#key
  }

  /** The federated assertion as it is, once it is known to be a JWT that has not expired. */
  #federated (text: string): string {
    const assertion = text.trim()
    let exp: number | undefined
    try {
      exp = decodeJwt(assertion).exp
    } catch {
      throw new GrantError('AUTH_CLIENT_ASSERTION_FILE holds no JWT', 'credential')
    }
    const now = this.#o.nowSeconds?.() ?? Date.now() / 1000
    if (exp !== undefined && exp <= now) {
      throw new GrantError(`AUTH_CLIENT_ASSERTION_FILE holds a JWT that expired at ${new Date(exp * 1000).toISOString()}: whatever issues it (the kubelet, a SPIFFE agent) has not replaced it`, 'credential')
    }
    return assertion
  }
}

/** application/x-www-form-urlencoded encoding of one value. */
function formEncode (value: string): string {
  return new URLSearchParams([['', value]]).toString().slice(1)
}
