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
  if (header === undefined) return undefined
  const text = (Array.isArray(header) ? header.join(', ') : String(header)).slice(0, MAX_CHALLENGE_CHARS)
  let scheme = ''
  for (const [, name, value] of text.matchAll(CHALLENGE_PART)) {
    if (value === undefined) {
      scheme = name!.toLowerCase()
    } else if (scheme === 'dpop' && name!.toLowerCase() === 'error') {
      const error = value.startsWith('"') ? value.slice(1, -1).replace(/\\(.)/g, '$1') : value
      return DPOP_REFUSALS.find((r) => r === error)
    }
  }
  return undefined
}
