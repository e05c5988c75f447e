import { properties } from './schema.js'

/** The prefixes of the sidecar's variables: an unknown name with one of them is probably a typo. */
const PREFIXES = [...new Set(Object.keys(properties).map((name) => name.slice(0, name.indexOf('_') + 1)))]

/**
 * Kubernetes injects these for every Service in the namespace: a Service
 * named auth-sidecar gives AUTH_SIDECAR_SERVICE_HOST, AUTH_SIDECAR_PORT_80_TCP
 * and so on. They are no misspellings.
 */
const SERVICE_LINK = /_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT|PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)$/

/** Variables the sidecar reads besides its schema (any case for the egress proxy ones). */
export const EGRESS = ['HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY']

/** Warnings for variables with one of the sidecar's prefixes that are not its own. */
export function unknownVariableWarnings (names: Iterable<string>): string[] {
  const warnings: string[] = []
  for (const name of names) {
    // ROUTE_ variables are the routes' (routes.ts names the unknown ones)
    if (name in properties || name.startsWith('ROUTE_') || !PREFIXES.some((p) => name.startsWith(p)) || SERVICE_LINK.test(name)) continue
    const nearest = nearestName(name)
    warnings.push(`${name} is not a variable of auth-sidecar${nearest === undefined ? '' : `; did you mean ${nearest}?`}`)
  }
  return warnings
}

/** The sidecar's variable (or one of `candidates`) closest to a misspelt `name`, if one is close enough to be meant. */
export function nearestName (name: string, candidates: readonly string[] = [...Object.keys(properties), ...EGRESS]): string | undefined {
  let best: string | undefined
  let bestDistance = Infinity
  for (const candidate of candidates) {
    const d = editDistance(name, candidate)
    if (d < bestDistance) {
      best = candidate
      bestDistance = d
    }
  }
  // a dropped suffix (UPSTREAM_TIMEOUT for UPSTREAM_TIMEOUT_MS) is a close match too
  return best !== undefined && (bestDistance <= Math.max(3, Math.floor(name.length / 3)) || best.startsWith(name)) ? best : undefined
}

/** Levenshtein's distance between two names. */
export function editDistance (a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i)
  for (let i = 1; i <= a.length; i++) {
    const current = [i]
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1))
    }
    previous = current
  }
  return previous[b.length]!
}

/**
 * `text` with each AUTH_* variable it names said as the operator set it for
 * one credential: a named route's own (ROUTE_<NAME>_AUTH_*) where `setBy`
 * has it, the default route's name otherwise.
 */
export function inTheirNames (text: string, setBy: Readonly<Record<string, string>> | undefined): string {
  if (setBy === undefined) return text
  return text.replace(/\bAUTH_[A-Z_]*[A-Z]/g, (variable) => setBy[variable] ?? variable)
}
