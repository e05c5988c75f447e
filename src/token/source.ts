import type { GrantType } from './grant.js'

export type GrantOutcome = 'success' | 'rejected' | 'error'

/** How ending the session on shutdown went; `skipped`: there was none to end, or no endpoint to end it at. */
export type LogoutOutcome = 'success' | 'rejected' | 'error' | 'skipped'

export interface LogoutResult {
  outcome: LogoutOutcome
  /** one human sentence, secret-free */
  detail: string
}

/** Counts what happened at the auth server, for the metrics. */
export interface TokenEvents {
  onGrant?: (grant: GrantType, outcome: GrantOutcome) => void
  onLogout?: (outcome: LogoutOutcome) => void
}

/**
 * What the proxy needs from the token layer: an Authorization header value,
 * now or soon, and a way to say the upstream refused it. The proxy never
 * learns how the credential is obtained.
 */
export interface AuthorizationSource {
  /** The header for a token that is valid now, or undefined. */
  current(): string | undefined
  /** The header, waiting (bounded) for a token being obtained; rejects with TokenUnavailableError. */
  authorization(): Promise<string>
  /**
   * The upstream rejected this header: drop it and obtain another, once per
   * header. Returns whether a new one is being obtained (a replay may wait
   * for it); false while 401-caused renewals back off, or when another
   * request's 401 already replaced it.
   */
  rejected(header: string): boolean
  /** The upstream answered something other than 401: 401-caused renewals stop backing off. */
  accepted(): void
  /**
   * The DPoP proof for a request carrying `header` to `url` (the upstream
   * URL without query) with `method`; undefined when the tokens are bearer
   * tokens.
   */
  proof(header: string, method: string, url: string): string | undefined
  /**
   * An upstream answer's `DPoP-Nonce` header, as it came: a valid nonce is
   * carried by the proofs from now on (DPoP mode only).
   */
  upstreamNonce(header: string | string[] | number | undefined): void
  /** Whether a valid credential is held (readiness). */
  ready(): boolean
  /** Why not ready, in a few words an operator can act on; undefined when ready. */
  notReadyReason(): string | undefined
  /** Seconds until the held credential expires; 0 without one. */
  expiresInSeconds(): number
  start(): void
  stop(): void
  /**
   * Ends the auth server session the credential opened, best effort, within
   * `timeoutMs`; the credential is dropped. Call after stop().
   */
  endSession(timeoutMs: number): Promise<LogoutResult>
}
