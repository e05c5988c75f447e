// PEM files as the configuration takes them: certificates, and a client
// certificate with its key, checked without a connection made.
import { createHash, createPrivateKey, X509Certificate } from 'node:crypto'
import { TlsFileError } from './errors.js'

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

export const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g

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

/**
 * The PEM certificate blocks of a CA file, as they are, each checked to be
 * whole DER (TLS itself skips a block it cannot read without a word). They
 * are parsed once, by TLS, when its context is made: a bundle of thousands
 * of CAs costs a second of CPU for each parse. Throws naming `variable`.
 */
export function pemBlocks (text: string, variable: string): string[] {
  const blocks = text.match(PEM_CERTIFICATE) ?? []
  if (blocks.length === 0) throw new TlsFileError(`${variable} holds no PEM certificate`)
  if ((text.match(/-----BEGIN CERTIFICATE-----/g) ?? []).length !== blocks.length) throw new TlsFileError(`${variable} holds a PEM block without its end (a file still being written?)`)
  blocks.forEach((block, i) => {
    if (!isDerSequence(Buffer.from(block.slice(27, -25).replace(/\s+/g, ''), 'base64'))) throw new TlsFileError(`${variable} holds a PEM block that is not a certificate (the ${ordinal(i + 1)})`)
  })
  return blocks
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

function ordinal (n: number): string {
  return n === 1 ? 'first' : n === 2 ? 'second' : n === 3 ? 'third' : `${n}th`
}
