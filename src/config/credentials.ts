import { watchFiles } from './watched-files.js'
import { readSecretFile } from './secret-file.js'
import type { CredentialSource, CredentialSources } from './types.js'

/** The secret values of a credential as they are at one moment, from the environment or their files. */
export interface SecretValues {
  /** absent with client_credentials */
  username?: string
  password?: string
  clientSecret?: string
  /** private_key_jwt: the key file's text */
  clientKey?: string
  /** federated_jwt: the assertion file's text */
  clientAssertion?: string
}


const NAMES = ['username', 'password', 'clientSecret', 'clientKey', 'clientAssertion'] as const

/**
 * The service account's credentials. Values that come from files (mounted
 * Kubernetes secrets) are read again for every request to the auth server,
 * so a rotated secret is used at the next one; `onChange` reports a change
 * as soon as it is seen. Reads never hold up the event loop, and take
 * regular files of bounded size only (secret-file.ts). A file that cannot
 * be used (gone for a moment while the kubelet swaps a symlink, turned into
 * something else, grown too large) keeps its last good value, and `warn` is
 * told once, naming the variable and the file.
 */
export class CredentialStore {
  readonly #sources: CredentialSources
  readonly #warn: (message: string) => void
  readonly #last = new Map<string, string>()
  /** the problem last told for each file, until it is readable again */
  readonly #told = new Map<string, string>()
  /** the values as the listener was last told of a change (as first read, until then): what a change is measured from */
  #reported: Map<string, string> | undefined
  readonly #files: string[]
  #listener: (() => void) | undefined
  #unwatch: (() => void) | undefined

  constructor (sources: CredentialSources, warn: (message: string) => void) {
    this.#sources = sources
    this.#warn = warn
    this.#files = Object.values(sources).flatMap((s: CredentialSource | undefined) => (s?.file ? [s.file] : []))
  }

  /** The credentials as they are now. */
  async read (): Promise<SecretValues> {
    const creds: SecretValues = {}
    for (const name of NAMES) {
      const source = this.#sources[name]
      if (source !== undefined) creds[name] = await this.#value(source)
    }
    this.#reported ??= new Map(this.#last)
    return creds
  }

  /** Calls `listener` whenever a credential file's value changes. */
  onChange (listener: () => void): void {
    this.#listener = listener
    this.#unwatch ??= watchFiles(this.#files, this.#changed)
  }

  close (): void {
    this.#unwatch?.()
    this.#unwatch = undefined
    this.#listener = undefined
  }

  readonly #changed = (): void => {
    // a file rewritten with the same value (or found unchanged by the watch's check) is no change to tell;
    // measured from what was told, as a grant's read may have seen the new value first
    const before = this.#reported
    this.read().then(() => {
      if (before === undefined || ![...this.#last].some(([file, value]) => before.get(file) !== value)) return
      this.#reported = new Map(this.#last)
      this.#listener?.()
    }, () => {})
  }

  async #value (source: CredentialSource): Promise<string> {
    const file = source.file
    if (file === undefined) return source.value ?? ''
    let problem: string
    try {
      const value = await readSecretFile(file)
      if (value !== '') {
        this.#last.set(file, value)
        this.#told.delete(file)
        return value
      }
      problem = 'is empty'
    } catch (err) {
      problem = (err as Error).message
    }
    if (this.#told.get(file) !== problem) {
      this.#told.set(file, problem)
      const variable = source.variable.endsWith('_FILE') ? source.variable : `${source.variable}_FILE`
      this.#warn(`${variable} (${file}) ${problem}: ${this.#last.has(file) ? 'keeping its last good value' : 'no good value was read from it yet'}`)
    }
    return this.#last.get(file) ?? ''
  }
}
