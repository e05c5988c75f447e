import type { SecretValues } from '../config/credentials.js'
import { credentialEvents, type Authorization, type Credential, type LogoutResult, type Verdict } from './credential.js'

type Store = { read(): Promise<SecretValues>, onChange?(listener: () => void): void }

/** AUTH_MODE=basic: a fixed RFC 7617 header, rebuilt when a credential file changes. */
export class BasicCredential implements Credential {
  readonly kind = 'basic'
  readonly events = credentialEvents()
  readonly #credentials: Store
  #authorization: Authorization

  private constructor (credentials: Store, first: SecretValues) {
    this.#credentials = credentials
    this.#authorization = build(first)
  }

  static async create (credentials: Store): Promise<BasicCredential> {
    return new BasicCredential(credentials, await credentials.read())
  }

  start (): void {
    this.#credentials.onChange?.(() => {
      this.#credentials.read().then((creds) => { this.#authorization = build(creds) }, () => {})
    })
  }

  stop (): void {}
  current (): Authorization { return this.#authorization }
  authorize (): Promise<Authorization> { return Promise.resolve(this.#authorization) }
  /** A 401 is the upstream's verdict on fixed credentials: nothing to renew. */
  answered (): Verdict { return 'relay' }
  boundTo (): undefined { return undefined }
  ready (): boolean { return true }
  notReadyReason (): undefined { return undefined }
  expiresInSeconds (): number { return 0 }
  endSession (): Promise<LogoutResult> { return Promise.resolve({ outcome: 'skipped', detail: 'basic mode has no session' }) }
}

function build ({ username = '', password = '' }: SecretValues): Authorization {
  return { header: `Basic ${Buffer.from(`${username}:${password}`, 'utf8').toString('base64')}`, prove: undefined }
}
