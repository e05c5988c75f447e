import { createHash, createPrivateKey, X509Certificate } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { rootCertificates } from 'node:tls'

/** A client certificate and its private key, known to belong together. */
export interface ClientCertificate {
  /** the certificate file as read: the leaf, then its chain (PEM) */
  readonly cert: string
  /** the private key (PEM); never shown anywhere */
  readonly key: string
  /** the leaf's subject, as `CN=..., O=...` */
  readonly subject: string
  readonly notBefore: Date
  readonly notAfter: Date
  /** RFC 8705 `x5t#S256`: the base64url SHA-256 of the leaf's DER */
  readonly thumbprint: string
}

/** The variables a set of TLS files is named by, for messages. */
export interface TlsNames {
  cert: string
  key: string
  ca: string
}

/** A file that cannot be used, its variable named in the message (never its content). */
export class TlsFileError extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'TlsFileError'
  }
}

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g

/** The certificates of a PEM text, each parsed; throws naming `variable` when there is none or one cannot be read. */
export function pemCertificates (text: string, variable: string): X509Certificate[] {
  const blocks = text.match(PEM_CERTIFICATE) ?? []
  if (blocks.length === 0) throw new TlsFileError(`${variable} holds no PEM certificate`)
  return blocks.map((block, i) => {
    try {
      return new X509Certificate(block)
    } catch {
      throw new TlsFileError(`${variable} holds a PEM block that is not a certificate (the ${ordinal(i + 1)})`)
    }
  })
}

/**
 * A certificate file and its key file's text, checked: the certificate
 * parses, the key is an unencrypted PEM key (PKCS#8, PKCS#1 or SEC1), and it
 * is the certificate's. Whether the certificate is valid now is not checked
 * here (see `validity`).
 */
export function clientCertificate (certText: string, keyText: string, names: TlsNames): ClientCertificate {
  const [leaf] = pemCertificates(certText, names.cert)
  if (/-----BEGIN ENCRYPTED PRIVATE KEY-----|Proc-Type: 4,ENCRYPTED/.test(keyText)) {
    throw new TlsFileError(`${names.key} holds an encrypted key: give it unencrypted (PEM: PKCS#8, PKCS#1 or SEC1)`)
  }
  let key
  try {
    key = createPrivateKey({ key: keyText, format: 'pem' })
  } catch {
    throw new TlsFileError(`${names.key} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)`)
  }
  if (!leaf!.checkPrivateKey(key)) throw new TlsFileError(`${names.key} holds a key that is not the one of the certificate in ${names.cert}`)
  return {
    cert: certText,
    key: keyText,
    subject: leaf!.subject.split('\n').join(', '),
    notBefore: new Date(leaf!.validFrom),
    notAfter: new Date(leaf!.validTo),
    thumbprint: createHash('sha256').update(leaf!.raw).digest('base64url')
  }
}

/** Why a certificate cannot be shown to a server at `now` (expired, not yet valid); undefined when it can. */
export function validity (certificate: ClientCertificate, variable: string, now = Date.now()): string | undefined {
  if (now >= certificate.notAfter.getTime()) return `the certificate in ${variable} expired at ${certificate.notAfter.toISOString()}: waiting for a renewed file`
  if (now < certificate.notBefore.getTime()) return `the certificate in ${variable} is not valid before ${certificate.notBefore.toISOString()}: waiting for it`
  return undefined
}

let extraCas: string[] | undefined

/**
 * The CAs a connection trusts when a CA file is given: Node's own, those of
 * NODE_EXTRA_CA_CERTS, and the file's PEM blocks as they are. (A `ca` option
 * replaces Node's trust, so the others are listed with it.) The blocks are
 * parsed once, by TLS itself, when its context is made: a bundle of
 * thousands of CAs costs a second of CPU for each parse.
 */
export function trustedCas (caText: string, variable: string): string[] {
  const own = caText.match(PEM_CERTIFICATE) ?? []
  if (own.length === 0) throw new TlsFileError(`${variable} holds no PEM certificate`)
  // TLS skips a block it cannot read without a word: each is checked to be whole DER first
  if ((caText.match(/-----BEGIN CERTIFICATE-----/g) ?? []).length !== own.length) throw new TlsFileError(`${variable} holds a PEM block without its end (a file still being written?)`)
  own.forEach((block, i) => {
    if (!isDerSequence(Buffer.from(block.slice(27, -25).replace(/\s+/g, ''), 'base64'))) throw new TlsFileError(`${variable} holds a PEM block that is not a certificate (the ${ordinal(i + 1)})`)
  })
  extraCas ??= extraCaCertificates()
  return [...rootCertificates, ...extraCas, ...own]
}

/** Whether `der` is one whole DER SEQUENCE, as a certificate is: its length as it says, nothing more, nothing less. */
function isDerSequence (der: Buffer): boolean {
  if (der.length < 2 || der[0] !== 0x30) return false
  const first = der[1]!
  if (first < 0x80) return der.length === 2 + first
  const bytes = first & 0x7f
  if (bytes === 0 || bytes > 4 || der.length < 2 + bytes) return false
  let length = 0
  for (let i = 0; i < bytes; i++) length = length * 256 + der[2 + i]!
  return der.length === 2 + bytes + length
}

/** NODE_EXTRA_CA_CERTS's certificates; Node itself warns when the file cannot be read. */
function extraCaCertificates (): string[] {
  const file = process.env.NODE_EXTRA_CA_CERTS
  if (file === undefined || file === '') return []
  try {
    return readFileSync(file, 'utf8').match(PEM_CERTIFICATE) ?? []
  } catch {
    return []
  }
}

/** Whether a TLS error is the server's refusal of the client certificate (an alert it sent), by its OpenSSL code. */
export function refusesCertificate (code: string | undefined): boolean {
  return code !== undefined && /^ERR_SSL_.*ALERT_(CERTIFICATE_|BAD_CERTIFICATE|UNKNOWN_CA|ACCESS_DENIED|UNSUPPORTED_CERTIFICATE)/.test(code)
}

function ordinal (n: number): string {
  return n === 1 ? 'first' : n === 2 ? 'second' : n === 3 ? 'third' : `${n}th`
}
