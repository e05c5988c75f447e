import { EventEmitter } from 'node:events'
import { createSecureContext, type SecureContext } from 'node:tls'
import { watchFiles } from '../config/watched-files.js'
import { MAX_CA_FILE_BYTES, MAX_SECRET_FILE_BYTES, readSecretFile } from '../config/secret-file.js'
import type { TlsPaths } from '../config/types.js'
import type { Logger } from '../logger.js'
import { readFileSync } from 'node:fs'
import { clientCertificate, PEM_CERTIFICATE, pemCertificates, type ClientCertificate, type TlsNames } from '../config/pem.js'
import { TlsFileError } from '../errors.js'
import { trustedCas, validity } from './certificate.js'


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
 * content replaces the current only when it is whole and consistent, and no
 * worse: a half-written file, a key that is not the certificate's, or a
 * certificate that has expired or is not valid yet while the one in use is,
 * keeps the good one, said once in the log. Content that did not change is
 * not parsed again (a bundle of thousands of CAs costs a second of CPU).
 */
export class TlsFiles extends EventEmitter<TlsFilesEvents> {
  /** which certificate it is, as the log, the metrics and `check` name it */
  readonly which: string
  readonly paths: TlsPaths
  readonly names: TlsNames
  readonly #log: Logger
  #certificate: ClientCertificate | undefined
  #context: ConnectTls = {}
  /** the files' content in use */
  #inUse: Texts = {}
  /** the problem last logged, until the files are good again */
  #told: string | undefined
  /** when renewed files were held back: looked at again when that may change */
  #recheck: NodeJS.Timeout | undefined
  #reading: Promise<void> | undefined
  #again = false
  #unwatch: (() => void) | undefined

  /** NODE_EXTRA_CA_CERTS's certificates, trusted with a CA file's */
  readonly #extraCas: readonly string[]

  private constructor (which: string, paths: TlsPaths, log: Logger, extraCas: readonly string[]) {
    super()
    this.which = which
    this.paths = paths
    this.names = paths.names
    this.#log = log
    this.#extraCas = extraCas
  }

  /** Reads the files once; throws a TlsFileError naming the file that cannot be used. */
  static async load (which: string, paths: TlsPaths, log: Logger, extraCas: readonly string[] = []): Promise<TlsFiles> {
    const files = new TlsFiles(which, paths, log, extraCas)
    files.#use(files.#parse(await files.#texts()))
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

  /** Whether the files are watched for a change. */
  get watching (): boolean {
    return this.#unwatch !== undefined
  }

  /** Watches the files for a change. */
  watch (): void {
    this.#unwatch ??= watchFiles(this.#files(), this.#changed)
  }

  close (): void {
    this.#unwatch?.()
    this.#unwatch = undefined
    clearTimeout(this.#recheck)
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
      if (this.#again && this.#unwatch !== undefined) {
        this.#again = false
        this.#changed()
      }
    })
  }

  async #reload (): Promise<void> {
    let read: Read | undefined
    try {
      const texts = await this.#texts()
      // touched or rewritten with the same content: nothing to parse again
      if (texts.cert === this.#inUse.cert && texts.key === this.#inUse.key && texts.ca === this.#inUse.ca) return this.#settled()
      read = this.#parse(texts)
    } catch (err) {
      return this.#tell(err instanceof TlsFileError ? err.message : String(err))
    }
    const before = this.#certificate
    // a renewal that cannot be presented (expired, not yet valid) never replaces a pair that can
    const worse = read.certificate === undefined ? undefined : validity(read.certificate, this.names.cert)
    if (worse !== undefined && before !== undefined && validity(before, this.names.cert) === undefined) {
      this.#tell(`${worse.replace(/: waiting for .*$/, '')}: keeping the certificate in use, valid until ${before.notAfter.toISOString()}`)
      // looked at again when the one in use ends, or the new one begins
      const begins = read.certificate!.notBefore.getTime()
      this.#recheckAt(begins > Date.now() ? Math.min(before.notAfter.getTime(), begins) : before.notAfter.getTime())
      return
    }
    this.#settled()
    this.#use(read)
    const c = read.certificate
    this.#log.info({
      event: 'tls',
      certificate: this.which,
      ...(c !== undefined && { subject: c.subject, notAfter: c.notAfter.toISOString(), thumbprint: c.thumbprint })
    }, c !== undefined && c.thumbprint !== before?.thumbprint ? 'client certificate renewed: new connections use it' : 'TLS files changed: new connections use them')
    this.emit('change')
  }

  /** A problem with the files as they are now, said once until they change into something else. */
  #tell (problem: string): void {
    if (problem !== this.#told) this.#log.warn({ event: 'tls', certificate: this.which, reason: problem }, 'the TLS files changed but cannot be used: keeping the ones in use')
    this.#told = problem
  }

  #settled (): void {
    this.#told = undefined
    clearTimeout(this.#recheck)
  }

  #recheckAt (time: number): void {
    clearTimeout(this.#recheck)
    if (this.#unwatch === undefined) return
    // the files held back are looked at again: their time may have come, or the one in use may have ended
    this.#recheck = setTimeout(this.#changed, Math.min(Math.max(0, time - Date.now()) + 1_000, RECHECK_MAX_MS))
    this.#recheck.unref()
  }

  #use (read: Read): void {
    this.#inUse = read.texts
    this.#certificate = read.certificate
    this.#context = read.context
  }

  async #texts (): Promise<Texts> {
    const { certFile, keyFile, caFile } = this.paths
    const text = async (file: string | undefined, variable: string, max = MAX_SECRET_FILE_BYTES): Promise<string | undefined> => {
      if (file === undefined) return undefined
      try {
        return await readSecretFile(file, max)
      } catch (err) {
        throw new TlsFileError(`${variable} ${(err as Error).message}`)
      }
    }
    return {
      ...(certFile !== undefined && keyFile !== undefined && { cert: await text(certFile, this.names.cert), key: await text(keyFile, this.names.key) }),
      ...(caFile !== undefined && { ca: await text(caFile, this.names.ca, MAX_CA_FILE_BYTES) })
    }
  }

  #parse (texts: Texts): Read {
    const certificate = texts.cert !== undefined && texts.key !== undefined ? clientCertificate(texts.cert, texts.key, this.names) : undefined
    const ca = texts.ca === undefined ? undefined : trustedCas(texts.ca, this.names.ca, this.#extraCas)
    return { texts, certificate, context: secureContext(certificate, ca, texts.ca, this.names) }
  }
}

/** Held-back files are looked at again at least this often (a timer's delay is bounded). */
const RECHECK_MAX_MS = 86_400_000

/** The files' content as read. */
interface Texts { cert?: string | undefined, key?: string | undefined, ca?: string | undefined }

interface Read {
  texts: Texts
  certificate: ClientCertificate | undefined
  context: ConnectTls
}

function secureContext (c: ClientCertificate | undefined, ca: string[] | undefined, caText: string | undefined, names: TlsNames): ConnectTls {
  if (c === undefined && ca === undefined) return {}
  try {
    return { secureContext: createSecureContext({ ...(c !== undefined && { cert: c.cert, key: c.key }), ...(ca !== undefined && { ca }) }) }
  } catch (err) {
    // which CA block cannot be read, when that is why (each parsed only now, on failure)
    if (caText !== undefined) pemCertificates(caText, names.ca)
    // OpenSSL's reason only: its messages never carry the files' content
    const which = [...(c !== undefined ? [names.cert, names.key] : []), ...(ca !== undefined ? [names.ca] : [])].join(', ')
    throw new TlsFileError(`${which}: TLS cannot use them: ${(err as Error).message}`)
  }
}

/** One TlsFiles per distinct set of files, so that a certificate used both ways is read and watched once. */
export class TlsFileSets {
  readonly #log: Logger
  readonly #sets = new Map<string, Promise<TlsFiles>>()
  /** how many users (routes, credentials) hold each set: the last to release it stops its watching */
  readonly #users = new Map<string, number>()

  readonly #extraCaFile: string | undefined
  #extraCas: string[] | undefined

  /** `extraCaFile`: NODE_EXTRA_CA_CERTS, whose CAs a CA file's are trusted with */
  constructor (log: Logger, extraCaFile?: string) {
    this.#log = log
    this.#extraCaFile = extraCaFile
  }

  /** NODE_EXTRA_CA_CERTS's certificates, read once; Node itself warns when the file cannot be read. */
  #extra (): string[] {
    if (this.#extraCas !== undefined) return this.#extraCas
    try {
      this.#extraCas = this.#extraCaFile === undefined ? [] : readFileSync(this.#extraCaFile, 'utf8').match(PEM_CERTIFICATE) ?? []
    } catch {
      this.#extraCas = []
    }
    return this.#extraCas
  }

  /** The files at `paths`, read once, for a user that releases them when done; throws a TlsFileError when they cannot be used. */
  async of (paths: TlsPaths, which: string): Promise<TlsFiles> {
    const key = keyOf(paths)
    let files = this.#sets.get(key)
    if (files === undefined) {
      const loading = files = TlsFiles.load(which, paths, this.#log, paths.caFile === undefined ? [] : this.#extra())
      this.#sets.set(key, loading)
      // files that cannot be used are read again by the next one to ask (a later version, once they are fixed)
      loading.catch(() => { if (this.#sets.get(key) === loading) this.#sets.delete(key) })
    }
    const loaded = await files
    this.#users.set(key, (this.#users.get(key) ?? 0) + 1)
    return loaded
  }

  /** One user of `files` is done with them (its route retired): the last one's release stops watching them. */
  release (files: TlsFiles): void {
    const key = keyOf(files.paths)
    const users = (this.#users.get(key) ?? 0) - 1
    if (users > 0) {
      this.#users.set(key, users)
      return
    }
    this.#users.delete(key)
    this.#sets.delete(key)
    files.close()
  }

  /** How many distinct sets of files are held. */
  get size (): number {
    return this.#sets.size
  }

  async watch (): Promise<void> {
    for (const files of this.#sets.values()) (await files.catch(() => undefined))?.watch()
  }

  async close (): Promise<void> {
    for (const files of this.#sets.values()) (await files.catch(() => undefined))?.close()
  }
}

function keyOf (paths: TlsPaths): string {
  return JSON.stringify([paths.certFile, paths.keyFile, paths.caFile])
}
