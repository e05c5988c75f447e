import { EventEmitter } from 'node:events'
import { unwatchFile, watchFile } from 'node:fs'
import { createSecureContext, type SecureContext } from 'node:tls'
import { SECRET_FILE_POLL_MS } from '../config/credentials.js'
import { MAX_CA_FILE_BYTES, MAX_SECRET_FILE_BYTES, readSecretFile } from '../config/secret-file.js'
import type { TlsPaths } from '../config/types.js'
import type { Logger } from '../logger.js'
import { clientCertificate, TlsFileError, trustedCas, validity, type ClientCertificate, type TlsNames } from './certificate.js'

export { TlsFileError }

/**
 * What a connection made now takes from the files: the client certificate
 * and key and the trusted CAs, as one context made when they are read. Given
 * as options instead, they would be parsed again, Node's own CAs with them,
 * for every connection, at many times a request's CPU.
 */
export interface ConnectTls {
  secureContext?: SecureContext
}

export interface TlsFilesEvents {
  /** the files changed and their new content is good: connections made from now on use it */
  change: []
}

/**
 * A set of TLS files (a client certificate, its key, CAs) as the sidecar
 * uses them while it runs: read at start, then read again whenever one of
 * them changes (cert-manager and SPIFFE renew them, often hourly). New
 * content replaces the current only when it is whole and consistent: a
 * half-written file or a key that is not the certificate's keeps the good
 * one, said once in the log, until the files change again.
 */
export class TlsFiles extends EventEmitter<TlsFilesEvents> {
  /** which certificate it is, as the log, the metrics and `check` name it */
  readonly which: string
  readonly paths: TlsPaths
  readonly names: TlsNames
  readonly #log: Logger
  #certificate: ClientCertificate | undefined
  #ca: string[] | undefined
  #context: ConnectTls = {}
  /** the problem last logged, until the files are good again */
  #told: string | undefined
  #reading: Promise<void> | undefined
  #again = false
  #watching = false

  private constructor (which: string, paths: TlsPaths, names: TlsNames, log: Logger) {
    super()
    this.which = which
    this.paths = paths
    this.names = names
    this.#log = log
  }

  /** Reads the files once; throws a TlsFileError naming the file that cannot be used. */
  static async load (which: string, paths: TlsPaths, names: TlsNames, log: Logger): Promise<TlsFiles> {
    const files = new TlsFiles(which, paths, names, log)
    const read = await files.#read()
    files.#certificate = read.certificate
    files.#ca = read.ca
    files.#context = read.context
    return files
  }

  /** The client certificate in use; undefined when none is configured. */
  get certificate (): ClientCertificate | undefined {
    return this.#certificate
  }

  /** What a new connection presents and trusts. */
  connectOptions (): ConnectTls {
    return this.#context
  }

  /** Why the certificate cannot be presented now (expired, not yet valid); undefined when it can, or there is none. */
  unusable (now = Date.now()): string | undefined {
    return this.#certificate === undefined ? undefined : validity(this.#certificate, this.names.cert, now)
  }

  /** Watches the files for a change. */
  watch (): void {
    if (this.#watching) return
    this.#watching = true
    for (const file of this.#files()) watchFile(file, { interval: SECRET_FILE_POLL_MS, persistent: false }, this.#changed)
  }

  close (): void {
    this.#watching = false
    for (const file of this.#files()) unwatchFile(file, this.#changed)
  }

  #files (): string[] {
    return [this.paths.certFile, this.paths.keyFile, this.paths.caFile].filter((f): f is string => f !== undefined)
  }

  readonly #changed = (): void => {
    if (this.#reading !== undefined) {
      this.#again = true
      return
    }
    this.#reading = this.#reload().finally(() => {
      this.#reading = undefined
      if (this.#again && this.#watching) {
        this.#again = false
        this.#changed()
      }
    })
  }

  async #reload (): Promise<void> {
    let read
    try {
      read = await this.#read()
    } catch (err) {
      const problem = err instanceof TlsFileError ? err.message : String(err)
      if (problem !== this.#told) this.#log.warn({ event: 'tls', certificate: this.which, reason: problem }, 'the TLS files changed but cannot be used: keeping the ones in use')
      this.#told = problem
      return
    }
    this.#told = undefined
    const before = this.#certificate
    const same = before?.thumbprint === read.certificate?.thumbprint && before?.key === read.certificate?.key && String(this.#ca) === String(read.ca)
    if (same) return
    this.#certificate = read.certificate
    this.#ca = read.ca
    this.#context = read.context
    const c = read.certificate
    this.#log.info({
      event: 'tls',
      certificate: this.which,
      ...(c !== undefined && { subject: c.subject, notAfter: c.notAfter.toISOString(), thumbprint: c.thumbprint })
    }, c !== undefined && c.thumbprint !== before?.thumbprint ? 'client certificate renewed: new connections use it' : 'TLS files changed: new connections use them')
    this.emit('change')
  }

  async #read (): Promise<{ certificate: ClientCertificate | undefined, ca: string[] | undefined, context: ConnectTls }> {
    const { certFile, keyFile, caFile } = this.paths
    const text = async (file: string, variable: string, max = MAX_SECRET_FILE_BYTES): Promise<string> => {
      try {
        return await readSecretFile(file, max)
      } catch (err) {
        throw new TlsFileError(`${variable} ${(err as Error).message}`)
      }
    }
    const certificate = certFile !== undefined && keyFile !== undefined
      ? clientCertificate(await text(certFile, this.names.cert), await text(keyFile, this.names.key), this.names)
      : undefined
    const ca = caFile !== undefined ? trustedCas(await text(caFile, this.names.ca, MAX_CA_FILE_BYTES), this.names.ca) : undefined
    return { certificate, ca, context: secureContext(certificate, ca, this.names) }
  }
}

function secureContext (c: ClientCertificate | undefined, ca: string[] | undefined, names: TlsNames): ConnectTls {
  if (c === undefined && ca === undefined) return {}
  try {
    return { secureContext: createSecureContext({ ...(c !== undefined && { cert: c.cert, key: c.key }), ...(ca !== undefined && { ca }) }) }
  } catch (err) {
    // OpenSSL's reason only: its messages never carry the files' content
    const which = [...(c !== undefined ? [names.cert, names.key] : []), ...(ca !== undefined ? [names.ca] : [])].join(', ')
    throw new TlsFileError(`${which}: TLS cannot use them: ${(err as Error).message}`)
  }
}

/** One TlsFiles per distinct set of files, so that a certificate used both ways is read and watched once. */
export class TlsFileSets {
  readonly #log: Logger
  readonly #sets = new Map<string, Promise<TlsFiles>>()

  constructor (log: Logger) {
    this.#log = log
  }

  /** The files at `paths`, read once; throws a TlsFileError when they cannot be used. */
  async of (paths: TlsPaths, which: string, names: TlsNames): Promise<TlsFiles> {
    const key = JSON.stringify([paths.certFile, paths.keyFile, paths.caFile])
    let files = this.#sets.get(key)
    if (files === undefined) {
      files = TlsFiles.load(which, paths, names, this.#log)
      this.#sets.set(key, files)
    }
    return await files
  }

  async watch (): Promise<void> {
    for (const files of this.#sets.values()) (await files).watch()
  }

  async close (): Promise<void> {
    for (const files of this.#sets.values()) (await files.catch(() => undefined))?.close()
  }
}
