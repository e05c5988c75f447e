import { resolve } from 'node:path'
import { clientCertificate, pemCertificates, type TlsNames } from './pem.js'
import { MAX_CA_FILE_BYTES, MAX_SECRET_FILE_BYTES, readSecretFileSync } from './secret-file.js'
import type { TlsPaths } from './types.js'

/** The files of one TLS setting as set (before resolving), and the variables that name them. */
export interface TlsSetting {
  cert?: string
  key?: string
  ca?: string
  names: TlsNames
}

/**
 * A set of TLS files checked at start: a certificate comes with its key
 * (and the reverse), each file is readable, the certificate and the CAs are
 * PEM, the key is unencrypted and is the certificate's. Whether the
 * certificate is valid today is not checked: an expired one keeps the
 * sidecar unready until a renewed file appears, it does not stop the start.
 * Undefined when none is set.
 */
export function tlsPaths (setting: TlsSetting, cwd: string, problems: string[]): TlsPaths | undefined {
  const { cert, key, ca, names } = setting
  if (cert === undefined && key === undefined && ca === undefined) return undefined
  if (cert !== undefined && key === undefined) problems.push(`${names.cert} is set without ${names.key}: give the certificate's key`)
  if (key !== undefined && cert === undefined) problems.push(`${names.key} is set without ${names.cert}: give the key's certificate`)
  const paths: TlsPaths = {
    names,
    ...(cert !== undefined && { certFile: resolve(cwd, cert) }),
    ...(key !== undefined && { keyFile: resolve(cwd, key) }),
    ...(ca !== undefined && { caFile: resolve(cwd, ca) })
  }
  const read = (path: string | undefined, variable: string, max = MAX_SECRET_FILE_BYTES): string | undefined => {
    if (path === undefined) return undefined
    try {
      return readSecretFileSync(path, max)
    } catch (err) {
      problems.push(`${variable} ${(err as Error).message}`)
      return undefined
    }
  }
  const [certText, keyText, caText] = [read(paths.certFile, names.cert), read(paths.keyFile, names.key), read(paths.caFile, names.ca, MAX_CA_FILE_BYTES)]
  try {
    if (certText !== undefined && keyText !== undefined) clientCertificate(certText, keyText, names)
    else if (certText !== undefined) pemCertificates(certText, names.cert)
  } catch (err) {
    problems.push((err as Error).message)
  }
  try {
    if (caText !== undefined) pemCertificates(caText, names.ca)
  } catch (err) {
    problems.push((err as Error).message)
  }
  return paths
}

/** The names of the TLS variables with `prefix` (UPSTREAM_TLS, AUTH_TLS, ROUTE_X_UPSTREAM_TLS). */
export function tlsNames (prefix: string): TlsNames {
  return { cert: `${prefix}_CERT_FILE`, key: `${prefix}_KEY_FILE`, ca: `${prefix}_CA_FILE` }
}
