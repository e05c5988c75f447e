import type { EventEmitter } from 'node:events'
import { TokenUnavailableError } from '../errors.js'
import { inTheirNames } from '../config/names.js'
import type { Logger } from '../logger.js'
import type { SecretScrubber } from '../secrets.js'
import type { CredentialEvents } from './credential.js'
import { GrantError, isCredentialRejection, refusesSubject } from './grant.js'
import type { OAuthClient } from './oauth-client.js'
import type { GrantTrace } from '../tracing/tracing.js'
import type { GrantCounter, Obtained, TokenSource } from './source.js'

/** The credential whose token is exchanged (its lifecycle). */
export interface ExchangeSubject {
  readonly events: EventEmitter<CredentialEvents>
  /** its current token, unless one of `refused`: then a new one, asked for once per refused token (TOKEN_WAIT_MS at most) */
  accessTokenOtherThan(refused: ReadonlySet<string>): Promise<string>
}

export interface TokenExchangeOptions {
  /** the auth server as the exchange reaches it: the subject's client authentication, DPoP key and endpoints, connections of its own */
  server: OAuthClient
  subject: ExchangeSubject
  audience: string
  scope?: string
  log: Logger
  secrets: SecretScrubber
  /** a named route's own AUTH_* variables, named so in what it says (CredentialConfig.setBy) */
  setBy?: Readonly<Record<string, string>>
}

/** Refused subject tokens remembered: a few renewals' worth. */
const MAX_REFUSED_SUBJECTS = 8

/**
 * Token exchange (RFC 8693): the token is the subject credential's current
 * access token exchanged for `audience`, and renewed by a new exchange,
 * never refreshed. A subject token the exchange refused is renewed once:
 * the refused token is never sent again, and the exchange is tried again
 * with the new one. Refused again, the refusal is not about a stale token:
 * it is paced, as rejected credentials are, the same subject token sent at
 * that pace and the subject left alone until an exchange works or the
 * subject renews by itself (its new token is tried at once). A failure of
 * the client's credentials, which the subject's grants use too, is also
 * tried again when the subject holds a new token. A refusal of the exchange
 * itself (not enabled for the client, say) only waits its pace.
 */
export class TokenExchange implements TokenSource {
  readonly grant = 'token_exchange'
  readonly server: OAuthClient
  readonly refreshes = false
  readonly #o: TokenExchangeOptions
  /** the subject tokens the exchange refused, newest last */
  readonly #refused = new Set<string>()
  /**
   * whether a refusal of the subject token may renew it: `asked` while that
   * renewal comes, `spent` once its token is held; open again after an
   * exchange that worked, or a subject token the renewal did not bring
   */
  #renewal: 'open' | 'asked' | 'spent' = 'open'
  /** a renewal waits for the subject's next token, its certificate having changed */
  #awaitingSubject = false
  /** the last attempt failed on what the subject's next token may have changed: its token, or the client credentials both use */
  #cueOnSubject = false

  constructor (options: TokenExchangeOptions) {
    this.#o = options
    this.server = options.server
    options.subject.events.on('token', this.#subjectRenewed)
  }

  readonly #subjectRenewed = (): void => { this.#renewal = this.#renewal === 'asked' ? 'spent' : 'open' }
  #cue: (() => void) | undefined

  stop (): void {
    // a credential a new configuration left out: its subject may live on, and must not keep it
    this.#o.subject.events.off('token', this.#subjectRenewed)
    if (this.#cue !== undefined) this.#o.subject.events.off('token', this.#cue)
  }

  async obtain (o: { count: GrantCounter }): Promise<Obtained> {
    this.#cueOnSubject = false
    await this.server.discover().catch((err: unknown) => { throw GrantError.at('discovery', err) })
    const token = await this.#subjectToken()
    try {
      return await this.#exchanged(token, o.count)
    } catch (err) {
      if (!(err instanceof GrantError && refusesSubject(err))) throw this.#failure(err)
      this.#cueOnSubject = true
      // the token a renewal brought, refused too: a new one would fare no better, so it is sent again at the pace
      if (this.#renewal !== 'open') throw GrantError.at(this.grant, err)
      this.#refuse(token)
      this.#renewal = 'asked'
      this.#o.log.info({ event: 'token', grant: this.grant, outcome: 'rejected', reason: inTheirNames(this.#o.secrets.scrub(err.message), this.#o.setBy) }, 'the subject token was refused: renewing it, then exchanging again')
      const renewed = await this.#o.subject.accessTokenOtherThan(this.#refused).catch(() => undefined)
      // no new subject token in time: paced, and tried as soon as one comes (the retry cue)
      if (renewed === undefined) throw GrantError.at(this.grant, err)
      this.#renewal = 'spent'
      this.#cueOnSubject = false
      try {
        return await this.#exchanged(renewed, o.count)
      } catch (again) {
        // refused too: paced, and tried at once should the subject renew by itself
        if (again instanceof GrantError && refusesSubject(again)) this.#cueOnSubject = true
        throw this.#failure(again)
      }
    }
  }

  onRetryCue (cue: () => void): void {
    // a refusal of the exchange itself (not enabled for the client, an unknown audience) stands whatever the subject holds: it waits its pace
    this.#cue = () => { if (this.#cueOnSubject) cue() }
    this.#o.subject.events.on('token', this.#cue)
  }

  certificateChanged (renew: (dropRefresh: boolean) => void): void {
    // the exchange is made with the subject's certificate: its token, bound to the new one, comes first
    if (this.#awaitingSubject) return
    this.#awaitingSubject = true
    this.#o.subject.events.once('token', () => {
      this.#awaitingSubject = false
      renew(false)
    })
  }

  async endSession (): Promise<undefined> {
    // an exchanged token opens no session of its own: its subject credential's is ended
    return undefined
  }

  async #exchanged (token: string, count: GrantCounter): Promise<Obtained> {
    const set = await count(this.grant, async (trace) => await this.#exchange(token, trace))
    this.#renewal = 'open'
    return { set, grant: this.grant }
  }

  async #exchange (token: string, trace: GrantTrace): ReturnType<OAuthClient['exchange']> {
    return await this.server.exchange(token, this.#o.audience, this.#o.scope, trace)
  }

  /** The subject's token to exchange: never one the exchange refused. */
  async #subjectToken (): Promise<string> {
    try {
      return await this.#o.subject.accessTokenOtherThan(this.#refused)
    } catch (err) {
      if (err instanceof TokenUnavailableError) throw new GrantError('no token to exchange: its credential holds none yet', 'transient', { step: this.grant })
      // its only token was refused, and no new one has come yet: the exchange is tried when it comes
      this.#cueOnSubject = true
      throw GrantError.at(this.grant, err)
    }
  }

  /** The error an attempt ends with; the client's credentials refused or unusable may be mended by the time the subject renews. */
  #failure (err: unknown): GrantError {
    if (err instanceof GrantError && (err.kind === 'credential' || isCredentialRejection(err))) this.#cueOnSubject = true
    return GrantError.at(this.grant, err)
  }

  #refuse (token: string): void {
    this.#refused.add(token)
    if (this.#refused.size > MAX_REFUSED_SUBJECTS) this.#refused.delete(this.#refused.values().next().value!)
  }
}
