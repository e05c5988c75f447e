/** The DPoP errors of an upstream's 401 that refuse the proof, not the token (RFC 9449 §7.1, §9). */
export const DPOP_REFUSALS = ['use_dpop_nonce', 'invalid_dpop_proof'] as const
export type DpopRefusal = typeof DPOP_REFUSALS[number]

/** A challenge's scheme, or one of its parameters (`name=value`, the value maybe quoted). */
const CHALLENGE_PART = /([!#$%&'*+.^_`|~0-9A-Za-z-]+)(?:[ \t]*=[ \t]*("(?:[^"\\]|\\.)*"|[^\s,]*))?/g
/** Longer headers are read no further: no challenge a resource server sends is near it. */
const MAX_CHALLENGE_CHARS = 4096

/**
 * The proof refusal a `WWW-Authenticate` header carries in its DPoP
 * challenge (`DPoP error="use_dpop_nonce"`, say), if any; the other
 * challenges (Bearer's), and a DPoP error about the token itself
 * (`invalid_token`), are not refusals of the proof.
 */
export function dpopRefusalOf (header: string | string[] | number | undefined): DpopRefusal | undefined {
  const error = challengesOf(header).find((c) => c.scheme === 'dpop' && c.error !== undefined)?.error
  return DPOP_REFUSALS.find((r) => r === error)
}

/**
 * Whether a 401's challenge says the token lacks a scope (RFC 6750 §3.1
 * `insufficient_scope`): the token is fine, a new one would lack it too.
 */
export function refusesScope (header: string | string[] | number | undefined): boolean {
  return challengesOf(header).some((c) => c.error === 'insufficient_scope')
}

/** Whether a `WWW-Authenticate` header holds a DPoP challenge at all. */
export function hasDpopChallenge (header: string | string[] | number | undefined): boolean {
  return challengesOf(header).some((c) => c.scheme === 'dpop')
}

/** A header's challenges: each scheme, lower-cased, with its `error` parameter if it has one. */
function challengesOf (header: string | string[] | number | undefined): Array<{ scheme: string, error?: string }> {
  if (header === undefined) return []
  const text = (Array.isArray(header) ? header.join(', ') : String(header)).slice(0, MAX_CHALLENGE_CHARS)
  const challenges: Array<{ scheme: string, error?: string }> = []
  for (const [, name, value] of text.matchAll(CHALLENGE_PART)) {
    if (value === undefined) {
      challenges.push({ scheme: name!.toLowerCase() })
    } else if (name!.toLowerCase() === 'error' && challenges.length > 0 && challenges.at(-1)!.error === undefined) {
      challenges.at(-1)!.error = value.startsWith('"') ? value.slice(1, -1).replace(/\\(.)/g, '$1') : value
    }
  }
  return challenges
}
