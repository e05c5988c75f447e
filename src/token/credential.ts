import { EventEmitter } from 'node:events'
import type { DpopRefusal } from './challenge.js'
import type { GrantType } from './grant.js'

export type GrantOutcome = 'success' | 'rejected' | 'error'

/** How ending the session on shutdown went; `skipped`: there was none to end, or no endpoint to end it at. */
export type LogoutOutcome = 'success' | 'rejected' | 'error' | 'skipped'

export interface LogoutResult {
  outcome: LogoutOutcome
  /** one human sentence, secret-free */
  detail: string
}

/** What goes with one request to the upstream. */
export interface Authorization {
  /** the Authorization header's value */
  readonly header: string
  /**
   * DPoP-bound tokens: a fresh proof for a request with `method` to `url`
   * (scheme, host and path, no query); undefined for bearer tokens and basic
   * credentials
   */
  readonly prove: ((method: string, url: string) => string) | undefined
  /**
   * The thumbprint (x5t#S256) of the client certificate the token was
   * obtained with: a certificate-bound token is sent only over connections
   * presenting that certificate. Undefined when none was presented.
   */
  readonly certificate?: string
}

/**
 * What the proxy does with an upstream 401: relay it; send the request once
 * more as it is (with a fresh proof carrying the nonce the upstream asked
 * for); or send it once more with the new authorization being obtained.
 */
export type Verdict = 'relay' | 'replay' | 'renewed'

/** Header values as Node and undici hold them. */
export type HeaderValue = string | string[] | number | undefined

/**
 * What the proxy needs from a credential for one request: an authorization,
 * now or soon, and a way to say what the upstream answered to it. It never
 * learns how the credential is obtained.
 */
export interface RequestCredential {
  /** An authorization valid now, or undefined while none is. */
  current(): Authorization | undefined
  /** One, waiting (TOKEN_WAIT_MS at most) for a token being obtained; rejects with TokenUnavailableError. */
  authorize(): Promise<Authorization>
  /**
   * The upstream answered `status` to a request that carried `authorization`,
   * with these `WWW-Authenticate` and `DPoP-Nonce` headers. For a 401, what
   * to do with the request: a rejected token is dropped and renewed, once
   * per token, and 401-driven renewals back off.
   */
  answered(authorization: Authorization, status: number, challenge: HeaderValue, nonce: HeaderValue): Verdict
  /**
   * A valid authorization whose token is bound to the client certificate
   * `certificate` (its thumbprint): the current one, or the one it replaced
   * while that is still valid. An upstream whose certificate files are
   * renewed after the auth server's keeps getting the token that matches
   * what it presents.
   */
  boundTo(certificate: string): Authorization | undefined
}

/** What happens to a credential, for whoever counts it (the metrics). */
export interface CredentialEvents {
  grant: [grant: GrantType, outcome: GrantOutcome]
  /** a new token is held */
  token: []
  logout: [outcome: LogoutOutcome]
  /** the upstream refused a DPoP proof (not the token) */
  dpop_refused: [reason: DpopRefusal]
}

/**
 * A credential's events, with no listener limit: every route that uses it,
 * every exchange made from it and the metrics listen, so a dozen routes
 * sharing one are a configuration, not a leak to warn of.
 */
export function credentialEvents (): EventEmitter<CredentialEvents> {
  return new EventEmitter<CredentialEvents>().setMaxListeners(0)
}

/** A credential as the sidecar runs it: the proxy's part, readiness, and its life. */
export interface Credential extends RequestCredential {
  readonly events: EventEmitter<CredentialEvents>
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
