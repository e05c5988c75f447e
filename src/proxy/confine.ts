/**
 * Keeps every request inside BASE_URL. A target is
 * refused, not repaired, when it could mean another origin or a path outside
 * the prefix: the absolute and authority forms, `//host`, backslashes, and dot
 * segments however they are encoded (and segments of three dots or more), or however a legacy server behind the
 * upstream would read them (`/..;/` for Tomcat and Spring, overlong UTF-8 and
 * full-width dots and slashes for IIS and servers that normalise Unicode, NUL).
 */

/** Decodings tried: `%252e` is `%2e` after one, `.` after two. */
const MAX_DECODE_ROUNDS = 4

/**
 * Byte sequences (as Latin-1 characters, the way Node hands over the target
 * and decodePercent decodes) that some server reads as `.`, `/` or `\`, or
 * that end a string early: NUL; overlong UTF-8 for `.` `/` `\` (C0 AE, C0 AF,
 * C1 9C, E0 80 AE, E0 80 AF, E0 81 9C); full-width `．` `／` `＼` (EF BC 8E,
 * EF BC 8F, EF BC BC).
 */
const AMBIGUOUS = /\x00|\xc0[\xae\xaf]|\xc1\x9c|\xe0\x80[\xae\xaf]|\xe0\x81\x9c|\xef\xbc[\x8e\x8f\xbc]/

/** Whether `url` (the raw request target) may be forwarded under the base path. */
export function isConfined (url: string): boolean {
  if (url.charCodeAt(0) !== 47 /* / */ || url.charCodeAt(1) === 47) return false
  const q = url.indexOf('?')
  let path = q === -1 ? url : url.slice(0, q)
  if (isPlain(path)) return true // the common case: nothing to decode or to read twice

  for (let round = 0; round < MAX_DECODE_ROUNDS; round++) {
    if (path.includes('\\') || AMBIGUOUS.test(path)) return false
    for (const segment of path.split('/')) {
      // `..;x` is `..` to servers that strip path parameters
      const name = segment.includes(';') ? segment.slice(0, segment.indexOf(';')) : segment
      // `...` and longer: some file systems read them as a parent (and IIS as dots trimmed)
      if (/^\.+$/.test(name)) return false
    }
    const decoded = decodePercent(path)
    if (decoded === path) return true
    // An encoded slash could join with a decoded `..` into a segment of its own.
    path = decoded
  }
  return false // still changing after several decodings: refuse rather than guess
}

/** No dot, percent sign, backslash, control or non-ASCII character: nothing anyone reads otherwise. */
function isPlain (path: string): boolean {
  for (let i = 0; i < path.length; i++) {
    const c = path.charCodeAt(i)
    if (c === 46 || c === 37 || c === 92 || c < 33 || c > 126) return false
  }
  return true
}

/** Decodes valid `%XX` escapes and leaves stray `%` alone (no throwing). */
function decodePercent (s: string): string {
  return s.replace(/%([0-9A-Fa-f]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)))
}
