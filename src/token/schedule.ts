/**
 * The timing rules of the token lifecycle, as pure functions of a
 * lifetime and a random number in [0, 1).
 */

/** Renewal starts no earlier than this fraction of the lifetime... */
export const RENEW_FROM = 0.5
/** ...and, jittered, no later than this one, leaving time to finish before 90%. */
export const RENEW_UNTIL = 0.75
/**
 * A token is not handed out in the last part of its life: 10% plus one
 * second, at most 5 s. The second covers Keycloak's whole-second `exp`
 * (a token may die up to 1 s before receipt + expires_in) and the trip to
 * the upstream. It never cuts into the first half, which renewal needs.
 */
export const EXPIRY_MARGIN_FRACTION = 0.1
export const EXPIRY_MARGIN_MIN_MS = 1_000
export const EXPIRY_MARGIN_MAX_MS = 5_000

/** Time after receipt until which a credential that lives `lifetimeMs` is still handed out. */
export function usableFor (lifetimeMs: number): number {
  const margin = Math.min(lifetimeMs * EXPIRY_MARGIN_FRACTION + EXPIRY_MARGIN_MIN_MS, EXPIRY_MARGIN_MAX_MS)
  return Math.max(lifetimeMs * RENEW_FROM, lifetimeMs - margin)
}

/**
 * Delay from receipt until the renewal of a token that lives `lifetimeMs`:
 * jittered between 50% and 75% of the lifetime, and for short lifetimes
 * early enough to finish while the token is still handed out, never before 50%.
 */
export function renewalDelay (lifetimeMs: number, random: number): number {
  const jittered = lifetimeMs * (RENEW_FROM + (RENEW_UNTIL - RENEW_FROM) * random)
  const latest = usableFor(lifetimeMs) - lifetimeMs * 0.05
  return Math.max(lifetimeMs * RENEW_FROM, Math.min(jittered, latest))
}

export interface BackoffPolicy {
  minMs: number
  maxMs: number
}

/**
 * Capped exponential backoff with jitter: attempt 0 waits between half and
 * all of `minMs`, each attempt doubles it, up to `maxMs`. A server's
 * Retry-After is honoured when longer, within `maxRetryAfterMs`.
 */
export function backoffDelay (policy: BackoffPolicy, attempt: number, random: number, retryAfterMs?: number, maxRetryAfterMs = 300_000): number {
  const ceiling = Math.min(policy.maxMs, policy.minMs * 2 ** Math.min(attempt, 30))
  const delay = ceiling / 2 + (ceiling / 2) * random
  if (retryAfterMs !== undefined && retryAfterMs > delay) return Math.min(retryAfterMs, maxRetryAfterMs)
  return delay
}

/** A fixed delay with ±10% jitter, for retries that must stay slow. */
export function slowRetryDelay (delayMs: number, random: number): number {
  return delayMs * (0.9 + 0.2 * random)
}
