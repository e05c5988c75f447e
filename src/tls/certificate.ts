import { rootCertificates } from 'node:tls'
import { pemBlocks, type ClientCertificate } from '../config/pem.js'

/** Why a certificate cannot be shown to a server at `now` (expired, not yet valid); undefined when it can. */
export function validity (certificate: ClientCertificate, variable: string, now = Date.now()): string | undefined {
  if (now >= certificate.notAfter.getTime()) return `the certificate in ${variable} expired at ${certificate.notAfter.toISOString()}: waiting for a renewed file`
  if (now < certificate.notBefore.getTime()) return `the certificate in ${variable} is not valid before ${certificate.notBefore.toISOString()}: waiting for it`
  return undefined
}

/**
 * The CAs a connection trusts when a CA file is given: Node's own, those of
 * NODE_EXTRA_CA_CERTS (`extra`), and the file's. (A `ca` option replaces
 * Node's trust, so the others are listed with it.)
 */
export function trustedCas (caText: string, variable: string, extra: readonly string[]): string[] {
  return [...rootCertificates, ...extra, ...pemBlocks(caText, variable)]
}

/** Whether a TLS error is the server's refusal of the client certificate (an alert it sent), by its OpenSSL code. */
export function refusesCertificate (code: string | undefined): boolean {
  return code !== undefined && /^ERR_SSL_.*ALERT_(CERTIFICATE_|BAD_CERTIFICATE|UNKNOWN_CA|ACCESS_DENIED|UNSUPPORTED_CERTIFICATE)/.test(code)
}
