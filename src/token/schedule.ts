/**
 * The timing rules of the token lifecycle (SPEC §4), as pure functions of a
 * lifetime and a random number in [0, 1).
 */

/** Renewal starts no earlier than this fraction of the lifetime... */
export const RENEW_FROM = 0.5
/** ...and no later than this one, leaving time to finish before 90%. */
export const RENEW_UNTIL = 0.75
/** A token is not handed out in the last part of its life: 10%, at most 5 s. */
export const EXPIRY_MARGIN_FRACTION = 0.1
export const EXPIRY_MARGIN_MAX_MS = 5_000

/** Delay from receipt until the renewal of a token that lives `lifetimeMs`. */
export function renewalDelay (lifetimeMs: number, random: number): number {
  return lifetimeMs * (RENEW_FROM + (RENEW_UNTIL - RENEW_FROM) * random)
}

/** Time after receipt until which a credential is still handed out. */
export function usableFor (lifetimeMs: number): number {
  return lifetimeMs - Math.min(lifetimeMs * EXPIRY_MARGIN_FRACTION, EXPIRY_MARGIN_MAX_MS)
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
