import type { Logger } from '../logger.js'
import { isCredentialRejection, type GrantError, type GrantType } from './grant.js'
import { backoffDelay, slowRetryDelay } from './schedule.js'

/** What the last failed attempt ran into, as readiness tells it. */
export type FailureClass = 'credentials' | 'rejected' | 'wrong_url' | 'unusable' | 'credential' | 'transient' | 'discovery'

export function classify (step: GrantType | 'discovery', e: GrantError): FailureClass {
  // nothing was sent, discovery or grant: the sidecar's own credential is the reason
  if (e.kind === 'credential') return 'credential'
  if (step === 'discovery') return 'discovery'
  if (e.kind === 'rejected') return isCredentialRejection(e) ? 'credentials' : 'rejected'
  return e.kind
}

/** Why the sidecar is not ready, in a few words an operator can act on. */
export function notReadyText (failure: FailureClass | undefined, endpoints: { tokenUrl: string | undefined, discoveryUrl: string | undefined }, message = ''): string {
  switch (failure) {
    case 'credentials': return 'credentials rejected by the auth server (see the log for its reason)'
    case 'rejected': return 'token request refused by the auth server (see the log for its reason)'
    case 'wrong_url': return `wrong token URL: ${endpoints.tokenUrl ?? ''} is not a token endpoint (set AUTH_URL and AUTH_REALM, AUTH_ISSUER_URL, or AUTH_TOKEN_URL)`
    case 'unusable': return 'the token endpoint answered without a usable token (see the log); retrying'
    case 'credential': return `the client credential cannot be used (${message}); retrying when its file changes`
    case 'discovery': return `OpenID Connect discovery at ${endpoints.discoveryUrl ?? ''} failed (see the log); retrying`
    case 'transient': return 'token endpoint unreachable or failing; retrying'
    default: return 'no valid access token'
  }
}

/**
 * One failed attempt, logged: refused credentials and unusable client
 * credentials every time (a minute apart; an operator must see them), a
 * wrong URL and any other failure once per episode, the repeats at debug;
 * `said` names the variables as the credential's route set them.
 */
export function logFailure (log: Logger, step: GrantType | 'discovery', e: GrantError, fields: object, repeated: boolean, said: (text: string) => string = (text) => text): void {
  const say = (level: 'error' | 'warn' | 'debug', message: string): void => { log[level](fields, said(message)) }
  if (e.kind === 'rejected' && isCredentialRejection(e)) {
    say('error', 'credentials rejected by the auth server: retrying slowly to avoid a lockout')
  } else if (e.kind === 'credential') {
    say('error', 'the client credential cannot be used: nothing was sent; retrying when its file changes')
  } else if (repeated) {
    say('debug', 'token request failed again')
  } else if (step === 'discovery' && e.kind === 'rejected') {
    say('error', 'discovery: the auth server does not offer what the configuration asks for; change the setting the reason names')
  } else if (step === 'discovery' && e.kind === 'wrong_url') {
    say('error', 'discovery failed: check AUTH_ISSUER_URL (Keycloak\'s is https://host/realms/<realm>)')
  } else if (e.kind === 'wrong_url') {
    say('error', 'wrong token URL: check AUTH_URL and AUTH_REALM, or set AUTH_TOKEN_URL to the realm\'s token endpoint')
  } else {
    say(e.kind === 'rejected' ? 'error' : 'warn', 'token request failed')
  }
}

/** How fast failed attempts are retried (TOKEN_RETRY_MIN_MS, TOKEN_RETRY_MAX_MS, TOKEN_REJECTED_RETRY_MS). */
export interface RetryPace {
  retryMinMs: number
  retryMaxMs: number
  rejectedRetryMs: number
}

/**
 * How long until an attempt that failed with `e` at `step` is retried,
 * `failures` attempts having failed before it in a row.
 */
export function retryDelay (step: GrantType | 'discovery', e: GrantError, failures: number, pace: RetryPace, random: number): number {
  // What will not change by itself, and what may each time have taken the
  // credentials somewhere, is retried slowly: a refusal (the server's, or
  // its metadata's of the configuration), a URL that is no token endpoint,
  // a client credential that cannot be used. An outage is
  // retried with backoff; so is an answer without a usable token (a
  // glitch, often), its backoff growing to the slow pace, since each such
  // answer may have opened a session.
  const slow = e.kind === 'credential' || e.kind === 'rejected' || (step !== 'discovery' && e.kind === 'wrong_url')
  return slow
    ? slowRetryDelay(pace.rejectedRetryMs, random)
    : backoffDelay({ minMs: pace.retryMinMs, maxMs: e.kind === 'unusable' ? pace.rejectedRetryMs : pace.retryMaxMs }, failures, random, e.retryAfterMs)
}

/**
 * The attempts that failed since the last token: how many, and what the
 * last one ran into, which readiness tells.
 */
export class FailureStreak {
  #count = 0
  #lastMessage = ''
  #lastClass: FailureClass | undefined

  get count (): number {
    return this.#count
  }

  /** One more failed attempt; true when it failed as the one before did (its log line repeats). */
  add (step: GrantType | 'discovery', e: GrantError): boolean {
    this.#lastClass = classify(step, e)
    this.#count += 1
    const repeated = e.message === this.#lastMessage
    this.#lastMessage = e.message
    return repeated
  }

  /** A token came: the streak is over. */
  end (): void {
    this.#count = 0
    this.#lastMessage = ''
    this.#lastClass = undefined
  }

  /** Why there is no token, as readiness says it; `scrub` takes the secrets out of the last failure's message. */
  notReadyText (endpoints: { tokenUrl: string | undefined, discoveryUrl: string | undefined }, scrub: (text: string) => string): string {
    return notReadyText(this.#lastClass, endpoints, scrub(this.#lastMessage))
  }
}
