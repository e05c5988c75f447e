import { resolve } from 'node:path'
import { parseClientKey, type KeyAlgorithm } from './client-key.js'
import type { ClientAuth, CredentialSource, PrimaryGrant } from './types.js'
import { readSecretFileSync } from './secret-file.js'
import type { Raw } from './values.js'

export interface ClientAuthSettings {
  clientAuth: ClientAuth
  keyAlg?: KeyAlgorithm
  keyId?: string
  clientKey?: CredentialSource
  clientAssertion?: CredentialSource
  /** whether AUTH_CLIENT_SECRET is needed */
  secretNeeded: boolean
}

const CLIENT_AUTHS: readonly ClientAuth[] = ['client_secret_post', 'client_secret_basic', 'private_key_jwt', 'client_secret_jwt', 'federated_jwt', 'tls_client_auth', 'self_signed_tls_client_auth']

/** Whether the client authenticates by its TLS certificate (RFC 8705: a CA's, or a self-signed one the server holds). */
export function byCertificate (clientAuth: ClientAuth): boolean {
  return clientAuth === 'tls_client_auth' || clientAuth === 'self_signed_tls_client_auth'
}

/**
 * How the client authenticates (AUTH_CLIENT_AUTH) and what each way needs:
 * a secret for the client_secret_* ways and client_credentials, a readable
 * private key that fits its algorithm for private_key_jwt, a readable
 * assertion file for federated_jwt, a client certificate (AUTH_TLS_CERT_FILE)
 * for tls_client_auth and self_signed_tls_client_auth. Settings another way would use are
 * warned about, not refused.
 */
export function clientAuthSettings (raw: Raw, cwd: string, grantType: PrimaryGrant, problems: string[], warnings: string[]): ClientAuthSettings {
  const clientAuth = CLIENT_AUTHS.find((c) => c === raw.AUTH_CLIENT_AUTH) ?? 'client_secret_post'
  // the ways that send no secret: a signed assertion, or the TLS client certificate
  const signed = clientAuth === 'private_key_jwt' || clientAuth === 'federated_jwt' || byCertificate(clientAuth)
  const secretSet = raw.AUTH_CLIENT_SECRET !== undefined || raw.AUTH_CLIENT_SECRET_FILE !== undefined
  const keyAlg = raw.AUTH_CLIENT_KEY_ALG as KeyAlgorithm | undefined
  const keyId = raw.AUTH_CLIENT_KEY_ID === undefined ? undefined : String(raw.AUTH_CLIENT_KEY_ID)
  const settings: ClientAuthSettings = {
    clientAuth,
    secretNeeded: clientAuth === 'client_secret_basic' || clientAuth === 'client_secret_jwt' || (grantType === 'client_credentials' && !signed),
    ...(keyAlg !== undefined && { keyAlg }),
    ...(keyId !== undefined && { keyId })
  }
  if (signed && secretSet) warnings.push(`AUTH_CLIENT_SECRET is not used with AUTH_CLIENT_AUTH=${clientAuth}: no secret is sent`)

  if (clientAuth === 'private_key_jwt') {
    const source = fileSource('AUTH_CLIENT_KEY_FILE', raw, cwd, problems, (text) => {
      try {
        parseClientKey(text, keyAlg)
      } catch (err) {
        problems.push(`AUTH_CLIENT_KEY_FILE holds ${(err as Error).message}`)
      }
    })
    if (source !== undefined) settings.clientKey = source
  } else {
    for (const name of ['AUTH_CLIENT_KEY_FILE', 'AUTH_CLIENT_KEY_ALG', 'AUTH_CLIENT_KEY_ID'] as const) {
      if (raw[name] !== undefined) warnings.push(`${name} is used only with AUTH_CLIENT_AUTH=private_key_jwt`)
    }
  }

  if (clientAuth === 'federated_jwt') {
    const source = fileSource('AUTH_CLIENT_ASSERTION_FILE', raw, cwd, problems, (text) => {
      if (text.trim().split('.').length !== 3) problems.push('AUTH_CLIENT_ASSERTION_FILE holds no JWT (three dot-separated parts)')
    })
    if (source !== undefined) settings.clientAssertion = source
  } else if (raw.AUTH_CLIENT_ASSERTION_FILE !== undefined) {
    warnings.push('AUTH_CLIENT_ASSERTION_FILE is used only with AUTH_CLIENT_AUTH=federated_jwt')
  }
  if (byCertificate(clientAuth) && (raw.AUTH_TLS_CERT_FILE === undefined || raw.AUTH_TLS_KEY_FILE === undefined)) {
    problems.push(`AUTH_TLS_CERT_FILE and AUTH_TLS_KEY_FILE are required with AUTH_CLIENT_AUTH=${clientAuth}: the certificate the client authenticates with`)
  }
  return settings
}

/** A credential that only comes from a file; `check` sees its content once, at start. */
function fileSource (name: 'AUTH_CLIENT_KEY_FILE' | 'AUTH_CLIENT_ASSERTION_FILE', raw: Raw, cwd: string, problems: string[], check: (text: string) => void): CredentialSource | undefined {
  const file = raw[name]
  if (file === undefined) {
    problems.push(`${name} is required with AUTH_CLIENT_AUTH=${name === 'AUTH_CLIENT_KEY_FILE' ? 'private_key_jwt' : 'federated_jwt'}`)
    return undefined
  }
  const path = resolve(cwd, String(file))
  try {
    const text = readSecretFileSync(path)
    if (text === '') problems.push(`${name} names an empty file`)
    else check(text)
  } catch (err) {
    problems.push(`${name} ${(err as Error).message}`)
  }
  return { variable: name, file: path }
}
