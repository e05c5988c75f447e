import { unwatchFile, watchFile } from 'node:fs'
import type { Config, CredentialSource } from './types.js'
import { readSecretFile } from './values.js'

export interface Credentials {
  /** absent with client_credentials */
  username?: string
  password?: string
  clientSecret?: string
  /** private_key_jwt: the key file's text */
  clientKey?: string
  /** federated_jwt: the assertion file's text */
  clientAssertion?: string
}

/** How often mounted secret files are checked for a change. */
export const SECRET_FILE_POLL_MS = 1_000

/**
 * The service account's credentials. Values that come from files (mounted
 * Kubernetes secrets) are read again on every `read()`, so a rotated secret
 * is used at the next grant; `onChange` reports a change as soon as it is
 * seen. A file that disappears for a moment (the kubelet swaps a symlink)
 * keeps its last good value.
 */
export class CredentialStore {
  readonly #sources: Config['credentials']
  readonly #last = new Map<string, string>()
  readonly #files: string[]
  #listener: (() => void) | undefined

  constructor (sources: Config['credentials']) {
    this.#sources = sources
    this.#files = Object.values(sources).flatMap((s: CredentialSource | undefined) => (s?.file ? [s.file] : []))
  }

  /** Whether any credential comes from a file that can change. */
  get fromFiles (): boolean {
    return this.#files.length > 0
  }

  read (): Credentials {
    const creds: Credentials = {}
    for (const name of ['username', 'password', 'clientSecret', 'clientKey', 'clientAssertion'] as const) {
      const source = this.#sources[name]
      if (source !== undefined) creds[name] = this.#value(source)
    }
    return creds
  }

  /** Calls `listener` whenever one of the credential files changes. */
  onChange (listener: () => void): void {
    this.#listener = listener
    for (const file of this.#files) {
      watchFile(file, { interval: SECRET_FILE_POLL_MS, persistent: false }, this.#changed)
    }
  }

  close (): void {
    for (const file of this.#files) unwatchFile(file, this.#changed)
    this.#listener = undefined
  }

  readonly #changed = (): void => {
    this.#listener?.()
  }

  #value (source: CredentialSource): string {
    if (source.file === undefined) return source.value ?? ''
    try {
      const value = readSecretFile(source.file)
      if (value !== '') {
        this.#last.set(source.file, value)
        return value
      }
    } catch {
      // fall through to the last good value
    }
    return this.#last.get(source.file) ?? ''
  }
}
