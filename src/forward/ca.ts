// @peculiar/x509 resolves its services through tsyringe, which needs the
// Reflect metadata API: loaded only with the forward proxy, before it.
import 'reflect-metadata'
import * as x509 from '@peculiar/x509'
import { createHash, createPrivateKey, KeyObject, randomBytes, webcrypto, X509Certificate } from 'node:crypto'
import { EventEmitter } from 'node:events'
import { isIP } from 'node:net'
import { createSecureContext, type SecureContext } from 'node:tls'
import { watchFiles } from '../config/watched-files.js'
import { caProblem, FORWARD_CA_NAMES } from '../config/forward.js'
import { readSecretFile } from '../config/secret-file.js'
import type { ForwardSettings } from '../config/types.js'
import type { Logger } from '../logger.js'

/** The longest a host's certificate is valid, and when it is made anew: a third of its life before it ends. */
export const LEAF_LIFETIME_MS = 24 * 3_600_000
const RENEW_BEFORE_END = 1 / 3
/** Hosts whose certificates are kept (the routes' hosts: a few); beyond it the oldest goes. */
export const MAX_LEAVES = 256

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0])

interface HeldCa {
  text: { cert: string, key: string }
  certificate: x509.X509Certificate
  /** for `check`, the metrics and the log */
  subject: string
  notBefore: Date
  notAfter: Date
  thumbprint: string
  signingKey: webcrypto.CryptoKey
  signingAlgorithm: webcrypto.AlgorithmIdentifier | webcrypto.EcdsaParams | webcrypto.RsaHashedImportParams
}

interface Leaf {
  context: SecureContext
  renewAt: number
}

export interface ForwardCaEvents {
  change: []
}

/**
 * The forward proxy's CA (FORWARD_PROXY_CA_CERT_FILE and _KEY_FILE) and
 * the certificates it signs for the hosts the proxy intercepts: one per
 * host, for exactly that host, an ECDSA P-256 key, valid at most
 * LEAF_LIFETIME_MS and never past the CA, made on first use and again
 * before it ends, MAX_LEAVES kept. The files are read again when they
 * change; a pair that is not whole, not a CA or whose key is not the CA's
 * keeps the one in use, said once; a new CA's certificates replace every
 * one made with the old. No key material goes anywhere but TLS.
 */
export class ForwardCa extends EventEmitter<ForwardCaEvents> {
  readonly #files: NonNullable<ForwardSettings['ca']>
  readonly #log: Logger
  #ca: HeldCa
  readonly #leafKeys: Promise<webcrypto.CryptoKeyPair>
  readonly #leaves = new Map<string, Promise<Leaf>>()
  #told: string | undefined
  #unwatch: (() => void) | undefined

  private constructor (files: NonNullable<ForwardSettings['ca']>, log: Logger, ca: HeldCa) {
    super()
    this.#files = files
    this.#log = log
    this.#ca = ca
    // one key for every host's certificate: what the CA signs is the host's name
    this.#leafKeys = webcrypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, true, ['sign', 'verify']) as Promise<webcrypto.CryptoKeyPair>
  }

  /** Reads the CA files; throws naming the variable when they cannot sign. */
  static async load (files: NonNullable<ForwardSettings['ca']>, log: Logger): Promise<ForwardCa> {
    return new ForwardCa(files, log, await readCa(files))
  }

  /** The CA as `check` and the metrics show it. */
  get certificate (): { subject: string, notAfter: Date, thumbprint: string } {
    return this.#ca
  }

  /** Why no host can be shown a certificate now (the CA has expired, or is not valid yet); undefined when it can. */
  unusable (now = Date.now()): string | undefined {
    if (now >= this.#ca.notAfter.getTime()) return `the CA in ${FORWARD_CA_NAMES.cert} expired at ${this.#ca.notAfter.toISOString()}: waiting for a renewed file`
    if (now < this.#ca.notBefore.getTime()) return `the CA in ${FORWARD_CA_NAMES.cert} is not valid before ${this.#ca.notBefore.toISOString()}`
    return undefined
  }

  /** The TLS context an intercepted connection to `host` (a name or an IP address) is answered with. */
  async contextFor (host: string): Promise<SecureContext> {
    const held = this.#leaves.get(host)
    if (held !== undefined) {
      const leaf = await held.catch(() => undefined)
      if (leaf !== undefined && Date.now() < leaf.renewAt) return leaf.context
      if (this.#leaves.get(host) === held) this.#leaves.delete(host)
    }
    let made = this.#leaves.get(host)
    if (made === undefined) {
      made = this.#issue(host, this.#ca)
      this.#leaves.set(host, made)
      if (this.#leaves.size > MAX_LEAVES) this.#leaves.delete(this.#leaves.keys().next().value!)
      made.catch(() => { if (this.#leaves.get(host) === made) this.#leaves.delete(host) })
    }
    return (await made).context
  }

  watch (): void {
    this.#unwatch ??= watchFiles([this.#files.certFile, this.#files.keyFile], this.#changed)
  }

  close (): void {
    this.#unwatch?.()
    this.#unwatch = undefined
  }

  readonly #changed = (): void => {
    readCa(this.#files, this.#ca).then((ca) => {
      this.#told = undefined
      if (ca === this.#ca) return
      this.#ca = ca
      // no certificate of the old CA is presented from now on
      this.#leaves.clear()
      this.#log.info({ event: 'forward_ca', subject: ca.subject, notAfter: ca.notAfter.toISOString(), thumbprint: ca.thumbprint }, 'the forward proxy\'s CA changed: new connections get certificates it signed')
      this.emit('change')
    }, (err: unknown) => {
      const problem = (err as Error).message
      if (problem !== this.#told) this.#log.warn({ event: 'forward_ca', reason: problem }, 'the forward proxy\'s CA files changed but cannot be used: keeping the CA in use')
      this.#told = problem
    })
  }

  async #issue (host: string, ca: HeldCa): Promise<Leaf> {
    const keys = await this.#leafKeys
    const now = Date.now()
    const notBefore = new Date(Math.max(now - 300_000, ca.notBefore.getTime()))
    const notAfter = new Date(Math.min(now + LEAF_LIFETIME_MS, ca.notAfter.getTime()))
    if (notAfter.getTime() <= now) throw new Error(this.unusable() ?? 'the CA has expired')
    const name = isIP(host) === 0 ? { type: 'dns' as const, value: host } : { type: 'ip' as const, value: host }
    const leaf = await x509.X509CertificateGenerator.create({
      // a positive serial of 128 random bits
      serialNumber: `01${randomBytes(16).toString('hex')}`,
      subject: `CN=${isIP(host) === 0 ? host : 'auth-sidecar forward proxy'}`,
      issuer: ca.certificate.subject,
      notBefore,
      notAfter,
      signingAlgorithm: ca.signingAlgorithm,
      publicKey: keys.publicKey,
      signingKey: ca.signingKey,
      extensions: [
        new x509.SubjectAlternativeNameExtension([name], true),
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
        await x509.AuthorityKeyIdentifierExtension.create(ca.certificate),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey)
      ]
    })
    // the CA file's certificates follow the host's: a CA that is itself an
    // intermediate (a cert-manager CA issuer's) is then verified up to the root the application trusts
    const context = createSecureContext({ cert: `${leaf.toString('pem')}\n${ca.text.cert}`, key: KeyObject.from(keys.privateKey).export({ type: 'pkcs8', format: 'pem' }) })
    const life = notAfter.getTime() - now
    return { context, renewAt: notAfter.getTime() - life * RENEW_BEFORE_END }
  }

}

/** The CA files read and checked; `held` back when they have not changed. */
async function readCa (files: NonNullable<ForwardSettings['ca']>, held?: HeldCa): Promise<HeldCa> {
  const text = { cert: await readSecretFile(files.certFile, 64 * 1024).catch(named(FORWARD_CA_NAMES.cert)), key: await readSecretFile(files.keyFile).catch(named(FORWARD_CA_NAMES.key)) }
  if (held !== undefined && held.text.cert === text.cert && held.text.key === text.key) return held
  const problem = caProblem(files.certFile, files.keyFile, (file) => file === files.certFile ? text.cert : text.key)
  if (problem !== undefined) throw new Error(problem)
  const native = new X509Certificate(text.cert)
  const privateKey = createPrivateKey({ key: text.key, format: 'pem' })
  const { importAlgorithm, signingAlgorithm } = algorithmsOf(privateKey)
  const signingKey = await webcrypto.subtle.importKey('pkcs8', privateKey.export({ type: 'pkcs8', format: 'der' }), importAlgorithm, false, ['sign'])
  return {
    text,
    certificate: new x509.X509Certificate(text.cert),
    subject: native.subject.split('\n').join(', '),
    notBefore: new Date(native.validFrom),
    notAfter: new Date(native.validTo),
    thumbprint: createHash('sha256').update(native.raw).digest('base64url'),
    signingKey,
    signingAlgorithm
  }
}

function named (variable: string): (err: Error) => never {
  return (err) => { throw new Error(`${variable} ${err.message}`) }
}

/** How WebCrypto imports the CA's key, and signs with it. */
function algorithmsOf (key: KeyObject): { importAlgorithm: webcrypto.AlgorithmIdentifier | webcrypto.EcKeyImportParams | webcrypto.RsaHashedImportParams, signingAlgorithm: HeldCa['signingAlgorithm'] } {
  if (key.asymmetricKeyType === 'rsa') return { importAlgorithm: { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' }, signingAlgorithm: { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' } }
  if (key.asymmetricKeyType === 'ed25519') return { importAlgorithm: { name: 'Ed25519' }, signingAlgorithm: { name: 'Ed25519' } }
  const p384 = key.asymmetricKeyDetails?.namedCurve === 'secp384r1'
  return { importAlgorithm: { name: 'ECDSA', namedCurve: p384 ? 'P-384' : 'P-256' }, signingAlgorithm: { name: 'ECDSA', hash: p384 ? 'SHA-384' : 'SHA-256' } }
}
