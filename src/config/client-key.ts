import { createPrivateKey, type KeyObject } from 'node:crypto'

/** The signing algorithms a client key may use (AUTH_CLIENT_KEY_ALG). */
export const KEY_ALGORITHMS = ['RS256', 'PS256', 'ES256', 'ES384', 'EdDSA'] as const
export type KeyAlgorithm = typeof KEY_ALGORITHMS[number]

export interface ClientKey {
  key: KeyObject
  /** the configured algorithm, else the key's own (RS256 for RSA) */
  alg: KeyAlgorithm
}

/**
 * A private key for private_key_jwt, from a file's text: PEM (PKCS#8, or
 * PKCS#1 for RSA, SEC1 for EC) or a JWK with its private part `d`. Throws an
 * Error whose message says what is wrong without quoting the key.
 */
export function parseClientKey (text: string, alg?: KeyAlgorithm): ClientKey {
  let key: KeyObject
  const trimmed = text.trim()
  try {
    if (trimmed.startsWith('{')) {
      const jwk = JSON.parse(trimmed) as { d?: unknown }
      if (typeof jwk.d !== 'string') throw new Error('a JWK without its private part "d"')
      key = createPrivateKey({ key: jwk as import('node:crypto').JsonWebKey, format: 'jwk' })
    } else {
      key = createPrivateKey(trimmed)
    }
  } catch (err) {
    const why = (err as Error).message.startsWith('a JWK') ? (err as Error).message : 'neither a PEM private key nor a JWK with "d"'
    throw new Error(why)
  }
  const allowed = algorithmsFor(key)
  if (allowed.length === 0) throw new Error(`a ${describe(key)} key: RSA, EC P-256 or P-384, or Ed25519 is needed`)
  if (alg !== undefined && !allowed.includes(alg)) throw new Error(`AUTH_CLIENT_KEY_ALG=${alg} does not fit a ${describe(key)} key (${allowed.join(' or ')})`)
  return { key, alg: alg ?? allowed[0]! }
}

/** The algorithms a key can sign with, the default first. */
function algorithmsFor (key: KeyObject): KeyAlgorithm[] {
  switch (key.asymmetricKeyType) {
    case 'rsa': return (key.asymmetricKeyDetails?.modulusLength ?? 0) >= 2048 ? ['RS256', 'PS256'] : []
    case 'ec': return key.asymmetricKeyDetails?.namedCurve === 'prime256v1' ? ['ES256'] : key.asymmetricKeyDetails?.namedCurve === 'secp384r1' ? ['ES384'] : []
    case 'ed25519': return ['EdDSA']
    default: return []
  }
}

function describe (key: KeyObject): string {
  const details = key.asymmetricKeyDetails
  if (key.asymmetricKeyType === 'rsa') return `${details?.modulusLength ?? 0}-bit RSA`
  if (key.asymmetricKeyType === 'ec') return `EC ${details?.namedCurve ?? ''}`
  return key.asymmetricKeyType ?? 'unknown'
}
