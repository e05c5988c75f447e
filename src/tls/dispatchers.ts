import type { Dispatcher } from 'undici'
import { refusesCertificate } from './certificate.js'
import type { ConnectTls, TlsFiles } from './files.js'

/** How long a certificate refusal explains the failures that follow it. */
const REFUSAL_MEMORY_MS = 2_000

/** One set of connections to a server, made with the TLS files as they were. */
export interface Connections {
  dispatcher: Dispatcher
}

type Made<C extends Connections> = C & {
  /** the thumbprint of the client certificate its connections present; undefined for none */
  certificate: string | undefined
}

/**
 * The connections to one server, made with TLS files as they are: when the
 * files change, a new dispatcher takes the new connections, and the old one
 * is closed (its requests finish first, its idle connections go). A token
 * bound to the old certificate keeps its connections until it is replaced:
 * `connectionFor` gives each request the dispatcher whose certificate
 * matches its token, and `retire` closes the old one once no held token is
 * bound to it.
 */
export class TlsDispatcher<C extends Connections = Connections> {
  readonly #make: (tls: ConnectTls, onTlsError: (code: string) => void) => C
  readonly #files: TlsFiles | undefined
  /** the certificate the credential's current token is bound to, if any */
  readonly #inUse: () => string | undefined
  #current: Made<C>
  /** replaced, but still bound to a token in use */
  #kept: Array<Made<C>> = []
  /** certificates whose dispatcher was closed: a token bound to one is stale */
  readonly #retired = new Set<string>()
  /** replaced and closing: their requests finish first */
  readonly #closing = new Map<Dispatcher, Promise<void>>()

  /** the last refusal of the client certificate a server sent, and when */
  #refused: { code: string, at: number } | undefined

  constructor (make: (tls: ConnectTls, onTlsError: (code: string) => void) => C, files: TlsFiles | undefined, inUse: () => string | undefined = () => undefined) {
    this.#make = make
    this.#files = files
    this.#inUse = inUse
    this.#current = this.#made()
    files?.on('change', this.#renew)
  }

  /** The dispatcher of new connections. */
  get current (): Dispatcher {
    return this.#current.dispatcher
  }

  /** The thumbprint of the certificate new connections present; undefined for none. */
  get certificate (): string | undefined {
    return this.#current.certificate
  }

  /**
   * The server's refusal of the client certificate (its TLS alert), when one
   * came in the last seconds: undici reports it as a closed connection.
   */
  refusal (): string | undefined {
    const r = this.#refused
    return r !== undefined && Date.now() - r.at < REFUSAL_MEMORY_MS ? r.code : undefined
  }

  /** The subject of the client certificate new connections present, for messages; undefined for none. */
  get subject (): string | undefined {
    return this.#files?.certificate?.subject
  }

  /** Why the certificate cannot be presented now (expired, not yet valid); undefined when it can. */
  unusable (): string | undefined {
    return this.#files?.unusable()
  }

  /** Whether connections presenting `certificate` (a thumbprint) are open: the current ones, or those kept for a token bound to it. */
  presents (certificate: string): boolean {
    return certificate === this.#current.certificate || this.#kept.some((m) => m.certificate === certificate)
  }

  /**
   * The connections for a request whose token was obtained presenting
   * `certificate`: those presenting that certificate while they are still
   * open; undefined when they were closed (the token is stale); otherwise
   * the current ones. A route's come with the connector its WebSocket
   * handshakes share.
   */
  connectionFor (certificate: string | undefined): C | undefined {
    if (certificate === undefined || certificate === this.#current.certificate) return this.#current
    const kept = this.#kept.find((m) => m.certificate === certificate)
    if (kept !== undefined) return kept
    return this.#retired.has(certificate) ? undefined : this.#current
  }

  /** Closes the replaced dispatchers that no held token is bound to any more. */
  retire (): void {
    const inUse = this.#inUse()
    const [keep, go] = [this.#kept.filter((m) => m.certificate === inUse), this.#kept.filter((m) => m.certificate !== inUse)]
    this.#kept = keep
    for (const m of go) this.#close(m)
  }

  /** Closes every dispatcher, their requests finished first. */
  async close (): Promise<void> {
    this.#files?.off('change', this.#renew)
    for (const m of [this.#current, ...this.#kept]) this.#close(m)
    await Promise.all([...this.#closing.values()])
  }

  /** Closes every dispatcher at once, cutting their requests. */
  async destroy (): Promise<void> {
    this.#files?.off('change', this.#renew)
    await Promise.all([this.#current.dispatcher, ...this.#kept.map((m) => m.dispatcher), ...this.#closing.keys()].map(async (d) => await d.destroy().catch(() => {})))
  }

  readonly #tlsError = (code: string): void => {
    if (refusesCertificate(code)) this.#refused = { code, at: Date.now() }
  }

  readonly #renew = (): void => {
    const old = this.#current
    this.#current = this.#made()
    if (old.certificate !== undefined && old.certificate !== this.#current.certificate) this.#kept.push(old)
    else this.#close(old)
    this.retire()
  }

  #made (): Made<C> {
    return { ...this.#make(this.#files?.connectOptions() ?? {}, this.#tlsError), certificate: this.#files?.certificate?.thumbprint }
  }

  #close (m: Made<C>): void {
    if (m.certificate !== undefined && m.certificate !== this.#current.certificate) {
      this.#retired.add(m.certificate)
      // a token outlives a few rotations at most
      if (this.#retired.size > 8) this.#retired.delete(this.#retired.values().next().value!)
    }
    // undici's close lets the requests it holds finish, then ends the connections
    this.#closing.set(m.dispatcher, m.dispatcher.close().catch(() => {}).finally(() => this.#closing.delete(m.dispatcher)))
  }
}
