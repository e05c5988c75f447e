import type { LogoutResult } from './credential.js'
import type { GrantType, TokenSet } from './grant.js'
import type { GrantTrace } from '../tracing/tracing.js'
import type { OAuthClient } from './oauth-client.js'
import type { HeldSession } from './session.js'

/** A token set, and the grant it came from. */
export interface Obtained {
  set: TokenSet
  grant: GrantType
}

/**
 * Sends one grant (`send`, given the grant's trace for its requests) and
 * tells whoever counts grants (the metrics, the traces) how it went;
 * resolves as `send` does.
 */
export type GrantCounter = (grant: GrantType, send: (trace: GrantTrace) => Promise<TokenSet>) => Promise<TokenSet>

/**
 * How a credential's tokens are obtained: its own grant (password or
 * client_credentials, refreshed while it may be), or token exchange of
 * another credential's. The lifecycle (lifecycle.ts) asks a source for a
 * token whenever it needs one and knows nothing more of how it comes.
 */
export interface TokenSource {
  /** the grant a new token comes from, as the logs and metrics name it */
  readonly grant: GrantType
  /** the auth server, as this source reaches it (discovery, the endpoints, the client's keys) */
  readonly server: OAuthClient
  /** whether a refresh token that comes with a set is kept, to renew by */
  readonly refreshes: boolean
  /**
   * A new token set: discovery first when it has not run, then the refresh
   * grant with `refresh` where given (`refreshSpent` is told when it can no
   * longer be used), else the source's own grant. Each grant sent is told
   * to `count`. Throws a GrantError whose `step` is the request that failed.
   */
  obtain(o: { refresh?: string | undefined, refreshSpent?: () => void, count: GrantCounter }): Promise<Obtained>
  /**
   * Calls `cue` whenever what made an attempt fail may have gone: a
   * credential file changed, the subject credential holds a new token.
   */
  onRetryCue(cue: () => void): void
  /**
   * The client certificate was renewed: `renew` is called when a new token
   * should be obtained with it (`dropRefresh`: the refresh token may be
   * bound to the old certificate).
   */
  certificateChanged(renew: (dropRefresh: boolean) => void): void
  /** Lets go of what it listens to, the credential being stopped; none by default. */
  stop?(): void
  /** Ends the session the source's grants opened within `timeoutMs`; undefined when they open none of their own. */
  endSession(held: HeldSession, timeoutMs: number): Promise<LogoutResult | undefined>
}
