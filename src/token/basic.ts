import type { Credentials } from '../config/credentials.js'
import type { AuthorizationSource, LogoutResult } from './source.js'

/** AUTH_MODE=basic: a fixed RFC 7617 header, rebuilt when a credential file changes. */
export class BasicAuthorization implements AuthorizationSource {
  readonly #credentials: { read(): Credentials, onChange?(listener: () => void): void }
  #header: string

  constructor (credentials: { read(): Credentials, onChange?(listener: () => void): void }) {
    this.#credentials = credentials
    this.#header = build(credentials.read())
  }

  start (): void {
    this.#credentials.onChange?.(() => { this.#header = build(this.#credentials.read()) })
  }

  stop (): void {}
  current (): string { return this.#header }
  authorization (): Promise<string> { return Promise.resolve(this.#header) }
  rejected (): boolean { return false }
  accepted (): void {}
  proof (): undefined { return undefined }
  upstreamNonce (): void {}
  ready (): boolean { return true }
  notReadyReason (): undefined { return undefined }
  expiresInSeconds (): number { return 0 }
  endSession (): Promise<LogoutResult> { return Promise.resolve({ outcome: 'skipped', detail: 'basic mode has no session' }) }
}

function build ({ username = '', password = '' }: Credentials): string {
  return `Basic ${Buffer.from(`${username}:${password}`, 'utf8').toString('base64')}`
}
