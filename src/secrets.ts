/** Shorter values are not replaced: a three-letter "secret" would blank out ordinary words. */
const MIN_LENGTH = 4
/** Formerly held tokens kept for scrubbing: enough for an auth server quoting an old one. */
const FORMER_TOKENS = 16

/**
 * Every secret value the sidecar holds or has held (password, client secret,
 * access and refresh tokens, a proxy's credentials), replaced in any text
 * before it is logged: the auth server or the upstream may echo
 * what was sent to them, in an error_description or an error message. The
 * values are also matched as they travel in a form (percent-encoded, spaces
 * as `+`). Pino's path redaction stays as the second line of defence.
 */
export class SecretScrubber {
  readonly #fixed = new Set<string>()
  readonly #tokens: string[] = []

  /** A credential: kept for the life of the process (a rotated password may still be echoed). */
  add (value: string | undefined): void {
    for (const v of forms(value)) this.#fixed.add(v)
  }

  /** A token: the newest FORMER_TOKENS are kept. */
  addToken (value: string | undefined): void {
    for (const v of forms(value)) {
      if (this.#tokens.includes(v)) continue
      this.#tokens.push(v)
      if (this.#tokens.length > FORMER_TOKENS * 2) this.#tokens.shift()
    }
  }

  scrub (text: string): string {
    let out = text
    for (const secret of this.#fixed) if (out.includes(secret)) out = out.split(secret).join(REDACTED)
    for (const secret of this.#tokens) if (out.includes(secret)) out = out.split(secret).join(REDACTED)
    return out
  }

  /**
   * A peer's text made fit to show: the known secrets replaced first, then
   * cut to at most `max` characters at a word's end.
   */
  shorten (text: string, max: number): string {
    const out = this.scrub(text)
    if (out.length <= max) return out
    // the word the cut runs through is dropped whole: it may be the start of a value
    const lastBreak = /\s/.test(out[max]!) ? max : out.slice(0, max).search(/\s\S*$/)
    return `${lastBreak > 0 ? out.slice(0, lastBreak) : ''}…`
  }
}

const REDACTED = '[redacted]'

function forms (value: string | undefined): string[] {
  if (value === undefined || value.length < MIN_LENGTH) return []
  const encoded = encodeURIComponent(value)
  const form = new URLSearchParams({ v: value }).toString().slice(2)
  return [...new Set([value, encoded, form])]
}
