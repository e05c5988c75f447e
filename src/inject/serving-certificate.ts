import { EventEmitter } from 'node:events'
import { createSecureContext } from 'node:tls'
import { clientCertificate, type ClientCertificate } from '../config/pem.js'
import { readSecretFile } from '../config/secret-file.js'
import { watchFiles } from '../config/watched-files.js'
import { TlsFileError } from '../errors.js'
import type { Logger } from '../logger.js'
import { validity } from '../tls/certificate.js'

const NAMES = { cert: 'INJECT_TLS_CERT_FILE', key: 'INJECT_TLS_KEY_FILE', ca: '' }

export interface ServingCertificateEvents {
  /** new files are in use: connections made from now on are shown this certificate */
  change: [{ subject: string, notAfter: string, thumbprint: string }]
}

/**
 * The webhook's serving certificate as files a Secret (cert-manager's
 * Certificate) renews: read at start, read again when they change, and put
 * into the server's TLS context only when the certificate and key are a
 * pair and no worse than the one in use (an expired or not yet valid
 * certificate never replaces a valid one); otherwise the one in use stays,
 * said in the log.
 */
export class ServingCertificate extends EventEmitter<ServingCertificateEvents> {
  readonly #certFile: string
  readonly #keyFile: string
  readonly #log: Logger
  #current: ClientCertificate
  #unwatch: (() => void) | undefined
  #reading = Promise.resolve()

  private constructor (certFile: string, keyFile: string, log: Logger, current: ClientCertificate) {
    super()
    this.#certFile = certFile
    this.#keyFile = keyFile
    this.#log = log
    this.#current = current
  }

  /** Reads the pair; throws a TlsFileError naming the variable whose file cannot be used. */
  static async load (certFile: string, keyFile: string, log: Logger): Promise<ServingCertificate> {
    return new ServingCertificate(certFile, keyFile, log, await read(certFile, keyFile))
  }

  /** The certificate and key, for the server's options at start. */
  get pem (): { cert: string, key: string } {
    return { cert: this.#current.cert, key: this.#current.key }
  }

  get certificate (): ClientCertificate {
    return this.#current
  }

  /** Watches the files; `use` gets each good new pair (for `setSecureContext`, which takes options, not a context). */
  watch (use: (pem: { cert: string, key: string }) => void): void {
    this.#unwatch ??= watchFiles([this.#certFile, this.#keyFile], () => {
      this.#reading = this.#reading.then(async () => { await this.#reload(use) })
    })
  }

  close (): void {
    this.#unwatch?.()
    this.#unwatch = undefined
  }

  async #reload (use: (pem: { cert: string, key: string }) => void): Promise<void> {
    let next: ClientCertificate
    try {
      next = await read(this.#certFile, this.#keyFile)
      if (next.cert === this.#current.cert && next.key === this.#current.key) return
      // what setSecureContext would throw on, found before it replaces anything
      createSecureContext({ cert: next.cert, key: next.key })
      const worse = validity(next, NAMES.cert)
      if (worse !== undefined && validity(this.#current, NAMES.cert) === undefined) throw new TlsFileError(worse.replace(/: waiting for .*$/, ''))
    } catch (err) {
      const reason = err instanceof TlsFileError ? err.message : 'TLS cannot use them'
      this.#log.warn({ event: 'tls', certificate: 'serving', reason }, 'the serving certificate\'s files changed but cannot be used: keeping the one in use')
      return
    }
    use({ cert: next.cert, key: next.key })
    this.#current = next
    const detail = { subject: next.subject, notAfter: next.notAfter.toISOString(), thumbprint: next.thumbprint }
    this.#log.info({ event: 'tls', certificate: 'serving', ...detail }, 'serving certificate renewed: new connections are shown it')
    this.emit('change', detail)
  }
}

async function read (certFile: string, keyFile: string): Promise<ClientCertificate> {
  const text = async (file: string, variable: string): Promise<string> => {
    try {
      return await readSecretFile(file)
    } catch (err) {
      throw new TlsFileError(`${variable} ${(err as Error).message}`)
    }
  }
  return clientCertificate(await text(certFile, NAMES.cert), await text(keyFile, NAMES.key), NAMES)
}
