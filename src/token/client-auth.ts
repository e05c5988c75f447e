import { createPublicKey, webcrypto } from 'node:crypto'
import { calculateJwkThumbprint, decodeJwt, exportJWK } from 'jose'
import * as oauth from 'oauth4webapi'
import { parseClientKey, type KeyAlgorithm } from '../config/client-key.js'
import type { SecretValues } from '../config/credentials.js'
import type { ClientAuth } from '../config/load.js'
import { GrantError } from './grant.js'

export const CLIENT_ASSERTION_TYPE = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'

/** WebCrypto's name of each signing algorithm, for importing the client's key. */
const SUBTLE: Record<KeyAlgorithm, Parameters<typeof webcrypto.subtle.importKey>[2]> = {
  RS256: { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' },
  PS256: { name: 'RSA-PSS', hash: 'SHA-256' },
  ES256: { name: 'ECDSA', namedCurve: 'P-256' },
  ES384: { name: 'ECDSA', namedCurve: 'P-384' },
  EdDSA: { name: 'Ed25519' }
}

/** A parsed client key, kept for as long as the key file's text is the same. */
interface HeldKey { text: string, key: webcrypto.CryptoKey, alg: KeyAlgorithm, kid: string }

export interface ClientAuthOptions {
  clientId: string
  clientAuth: ClientAuth
  keyAlg?: KeyAlgorithm
  keyId?: string
  /** told every secret value a request carries (the secret, an assertion, a Basic header), before it is sent */
  onSecret: (value: string) => void
}

/**
 * How the client proves itself on every request to the auth server (the
 * grants, the session's end), as oauth4webapi's client authentication, made
 * from the credentials as they are at that moment: a rotated key or a new
 * projected token is used from the next request on.
 * - client_secret_post / _basic: the secret in the form or in a Basic header
 *   (no secret: a public client, its id in the form);
 * - private_key_jwt / client_secret_jwt: a fresh assertion per request
 *   (RFC 7523: iss = sub = the client id, aud = the token endpoint, a unique
 *   jti, exp 60 s after iat), signed with the key or, HS256, the secret;
 * - federated_jwt: the JWT someone else issued, sent as it is, unless it has
 *   expired;
 * - tls_client_auth, self_signed_tls_client_auth: the client id in the
 *   form, the TLS client certificate the proof (RFC 8705 §2.1, §2.2: a CA's
 *   certificate, or a self-signed one the server holds).
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

  /** The client authentication for one request whose assertion names `audience` (the token endpoint). */
  async forRequest (creds: SecretValues, audience: string): Promise<oauth.ClientAuth> {
    const secret = creds.clientSecret === '' ? undefined : creds.clientSecret
    const claims = (alg: string, kid?: string): oauth.ModifyAssertionOptions => ({
      [oauth.modifyAssertion]: (header, payload) => {
        Object.assign(header, { alg, typ: 'JWT', ...(kid !== undefined && { kid }) })
        payload.aud = audience
      }
    })
    switch (this.#o.clientAuth) {
      case 'client_secret_basic':
        return this.#told(secret === undefined ? oauth.None() : oauth.ClientSecretBasic(secret))
      case 'private_key_jwt': {
        const { key, alg, kid } = await this.#signingKey(creds.clientKey ?? '')
        return this.#told(oauth.PrivateKeyJwt({ key, kid }, claims(alg, kid)))
      }
      case 'client_secret_jwt':
        if (secret === undefined) throw new GrantError('AUTH_CLIENT_SECRET is empty: client_secret_jwt signs with it', 'credential')
        return this.#told(oauth.ClientSecretJwt(secret, claims('HS256')))
      case 'federated_jwt':
        return this.#told(federated(this.#federated(creds.clientAssertion ?? '')))
      case 'tls_client_auth':
      case 'self_signed_tls_client_auth':
        // the connection's client certificate is the proof; the form names the client
        return oauth.TlsClientAuth()
      default:
        return this.#told(secret === undefined ? oauth.None() : oauth.ClientSecretPost(secret))
    }
  }

  /** The key's algorithm and kid as assertions carry them (the `check` command says them). */
  async keyDescription (creds: SecretValues): Promise<{ alg: KeyAlgorithm, kid: string } | undefined> {
    if (this.#o.clientAuth !== 'private_key_jwt') return undefined
    const { alg, kid } = await this.#signingKey(creds.clientKey ?? '')
    return { alg, kid }
  }

  /** `auth`, telling the scrubber what it put in the request before the request is sent. */
  #told (auth: oauth.ClientAuth): oauth.ClientAuth {
    return async (as, client, body, headers) => {
      await auth(as, client, body, headers)
      for (const value of [body.get('client_secret'), body.get('client_assertion'), headers.get('authorization')?.replace(/^Basic /, '')]) {
        if (value !== null && value !== undefined) this.#o.onSecret(value)
      }
    }
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
    const der = parsed.key.export({ type: 'pkcs8', format: 'der' })
    const key = await webcrypto.subtle.importKey('pkcs8', der, SUBTLE[parsed.alg], false, ['sign'])
    this.#key = { text, key, alg: parsed.alg, kid }
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
    if (exp !== undefined && exp <= Date.now() / 1000) {
      throw new GrantError(`AUTH_CLIENT_ASSERTION_FILE holds a JWT that expired at ${new Date(exp * 1000).toISOString()}: whatever issues it (the kubelet, a SPIFFE agent) has not replaced it`, 'credential')
    }
    return assertion
  }
}

/** Keycloak's "Signed JWT - Federated": an assertion someone else signed, in the form as RFC 7523 says. */
function federated (assertion: string): oauth.ClientAuth {
  return (_as, client, body) => {
    body.set('client_id', client.client_id)
    body.set('client_assertion_type', CLIENT_ASSERTION_TYPE)
    body.set('client_assertion', assertion)
  }
}
