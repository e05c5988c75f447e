import { inTheirNames } from '../config/names.js'
import type { Logger } from '../logger.js'
import type { SecretScrubber } from '../secrets.js'
import type { Clock } from './clock.js'
import type { LogoutResult } from './credential.js'
import { GrantError } from './grant.js'
import type { OAuthClient } from './oauth-client.js'
import { endSession, type HeldSession } from './session.js'
import type { GrantCounter, Obtained, TokenSource } from './source.js'

export interface OwnGrantsOptions {
  server: OAuthClient
  /** the credentials' store: a changed file may fix what made a grant fail */
  credentials: { onChange?(listener: () => void): void }
  clock: Clock
  log: Logger
  secrets: SecretScrubber
  /** a named route's own AUTH_* variables, named so in what it says (CredentialConfig.setBy) */
  setBy?: Readonly<Record<string, string>>
}

/**
 * The credential's own grant (AUTH_GRANT_TYPE: password or
 * client_credentials) and the refresh grant: a refresh token is used while
 * it may be, and one the server refuses, or answers without a usable token,
 * gives way to the own grant at once.
 */
export class OwnGrants implements TokenSource {
  readonly server: OAuthClient
  readonly refreshes = true
  readonly #o: OwnGrantsOptions

  constructor (options: OwnGrantsOptions) {
    this.#o = options
    this.server = options.server
  }

  get grant (): 'password' | 'client_credentials' {
    return this.server.grantType
  }

  async obtain (o: { refresh?: string | undefined, refreshSpent?: () => void, count: GrantCounter }): Promise<Obtained> {
    await this.server.discover().catch((err: unknown) => { throw GrantError.at('discovery', err) })
    const refresh = o.refresh
    if (refresh !== undefined) {
      try {
        return { set: await o.count('refresh_token', async (trace) => await this.server.refreshGrant(refresh, trace)), grant: 'refresh_token' }
      } catch (err) {
        // invalid_grant (expired, revoked, reused, session ended) or a 200
        // without a usable token (Keycloak's in an SSO session's last
        // second: expires_in 0) spends the refresh token: the own grant. A
        // network failure or 5xx keeps it, so that a blip opens no new
        // session (a reuse the server refuses is invalid_grant). Another
        // refusal (invalid_client, say) is the client's to fix.
        const spent = err instanceof GrantError && ((err.kind === 'rejected' && err.oauthError === 'invalid_grant') || err.kind === 'unusable')
        if (!spent) throw GrantError.at('refresh_token', err)
        o.refreshSpent?.()
        this.#o.log.info({ event: 'token', grant: 'refresh_token', outcome: 'rejected', reason: inTheirNames(this.#o.secrets.scrub(err.message), this.#o.setBy) }, `refresh token refused: falling back to the ${this.grant} grant`)
      }
    }
    try {
      return { set: await o.count(this.grant, async (trace) => await this.server.primaryGrant(trace)), grant: this.grant }
    } catch (err) {
      throw GrantError.at(this.grant, err)
    }
  }

  onRetryCue (cue: () => void): void {
    this.#o.credentials.onChange?.(cue)
  }

  certificateChanged (renew: (dropRefresh: boolean) => void): void {
    renew(true)
  }

  async endSession (held: HeldSession, timeoutMs: number): Promise<LogoutResult> {
    return await endSession(this.server, held, timeoutMs, this.#o.clock, (text, max) => this.#o.secrets.shorten(text, max))
  }
}
