/**
 * Keeps every request inside BASE_URL (SPEC §3.3). A target is refused, not
 * repaired, when it could mean another origin or a path outside the prefix:
 * the absolute and authority forms, `//host`, backslashes, and dot segments
 * however they are encoded.
 */

/** Decodings tried: `%252e` is `%2e` after one, `.` after two. */
const MAX_DECODE_ROUNDS = 4

/** Whether `url` (the raw request target) may be forwarded under the base path. */
export function isConfined (url: string): boolean {
  if (url.charCodeAt(0) !== 47 /* / */ || url.charCodeAt(1) === 47) return false
  const q = url.indexOf('?')
  let path = q === -1 ? url : url.slice(0, q)
  if (!path.includes('.') && !path.includes('%') && !path.includes('\\')) return true // the common case

  for (let round = 0; round < MAX_DECODE_ROUNDS; round++) {
    if (path.includes('\\')) return false
    for (const segment of path.split('/')) {
      if (segment === '.' || segment === '..') return false
    }
    const decoded = decodePercent(path)
    if (decoded === path) return true
    // An encoded slash could join with a decoded `..` into a segment of its own.
    path = decoded
  }
  return false // still changing after several decodings: refuse rather than guess
}

/** Decodes valid `%XX` escapes and leaves stray `%` alone (no throwing). */
function decodePercent (s: string): string {
  return s.replace(/%([0-9A-Fa-f]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)))
}
