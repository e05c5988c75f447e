import { EGRESS, nearestName } from './names.js'
import { ROUTE_SETTINGS } from './routes.js'
import { properties } from './schema.js'
import { readSecretFileSync } from './secret-file.js'

/** YAML's parse (the `yaml` package), passed in: it is loaded only when CONFIG_FILE is set. */
export type ParseYaml = (text: string, options: { uniqueKeys: boolean, prettyErrors: boolean }) => unknown

/** A route's name in the file: what a variable's `<NAME>` may hold, in either case. */
const ROUTE_NAME = /^[A-Za-z0-9_]+$/
/** The largest file read: a configuration, not a data set. */
const MAX_FILE_BYTES = 256 * 1024
/** The deepest nesting of [ and { taken: a configuration needs three; a parser given thousands takes seconds and hundreds of MB. */
const MAX_DEPTH = 64

/**
 * The settings of CONFIG_FILE as the variables they stand for: the same
 * names at the top level, `routes.<name>.<SETTING>` as
 * `ROUTE_<NAME>_<SETTING>`, a list as its comma-separated items, a number
 * or boolean as its text; null is unset. A key the sidecar does not know is
 * a problem naming the key; no value is ever repeated in one.
 */
export function readConfigFile (path: string, parse: ParseYaml, problems: string[]): Record<string, string> {
  const said = (text: string): void => { problems.push(`CONFIG_FILE ${path}: ${text}`) }
  let text: string
  try {
    // a regular file only, opened without blocking (a FIFO there would hold the process), of bounded size
    text = readSecretFileSync(path, MAX_FILE_BYTES)
  } catch (err) {
    said((err as Error).message)
    return {}
  }
  if (text.includes('\uFFFD')) {
    said('is not UTF-8 text')
    return {}
  }
  if (flowDepth(text) > MAX_DEPTH) {
    said(`nests lists or maps deeper than ${MAX_DEPTH}`)
    return {}
  }
  let document: unknown
  try {
    document = parse(text, { uniqueKeys: true, prettyErrors: false })
  } catch (err) {
    // the parser's message may quote the text around the mistake: only where it is
    const at = (err as { pos?: [number, number] }).pos?.[0]
    said(`is not YAML or JSON${at === undefined ? '' : ` (line ${text.slice(0, at).split('\n').length})`}`)
    return {}
  }
  if (document === null || document === undefined) return {}
  if (!isMap(document)) {
    said('must be a map of settings (NAME: value)')
    return {}
  }
  const values: Record<string, string> = {}
  for (const [key, value] of Object.entries(document)) {
    if (key === 'routes') {
      readRoutes(value, values, said, text)
      continue
    }
    if (key === 'CONFIG_FILE' || (!(key in properties) && !EGRESS.includes(key))) {
      said(key === 'CONFIG_FILE'
        ? 'CONFIG_FILE is set in the environment only'
        : /^ROUTE_[A-Z0-9_]+$/.test(key)
          ? `${key}: routes go under routes: (routes: {name: {BASE_URL: ..., PATH: ...}})`
          : unknownKey({ key, named: key, what: 'a setting of auth-sidecar' }, nearestName(key), text))
      continue
    }
    const shown = valueText(value)
    if (shown === false) said(`${key} must be a value or a list of values`)
    else if (shown !== undefined) values[key] = shown
  }
  return values
}

function readRoutes (routes: unknown, values: Record<string, string>, said: (text: string) => void, text: string): void {
  if (routes === null) return
  if (!isMap(routes)) return said('routes must be a map of route names to their settings')
  for (const [name, settings] of Object.entries(routes)) {
    if (!ROUTE_NAME.test(name) || name.length > 64) {
      said(`routes: a route's name is letters, digits and _, at most 64 (line ${lineOf(text, name)})`)
      continue
    }
    if (!isMap(settings)) {
      said(`routes.${name} must be a map of its settings (BASE_URL, PATH or PORT, AUTH_...)`)
      continue
    }
    for (const [setting, value] of Object.entries(settings)) {
      if (!ROUTE_SETTINGS.includes(setting)) {
        said(unknownKey({ key: setting, named: `routes.${name}.${setting}`, where: `routes.${name}: `, what: 'a route setting' }, nearestName(setting, ROUTE_SETTINGS), text))
        continue
      }
      const shown = valueText(value)
      if (shown === false) said(`routes.${name}.${setting} must be a value or a list of values`)
      else if (shown !== undefined) values[`ROUTE_${name.toUpperCase()}_${setting}`] = shown
    }
  }
}

/**
 * An unknown key, named only when it is close to a setting's name (a typo):
 * any other may be a value typed where a key goes (a secret, indented one
 * line too far), so only its line is given.
 */
function unknownKey (k: { key: string, named: string, where?: string, what: string }, nearest: string | undefined, text: string): string {
  return nearest === undefined
    ? `${k.where ?? ''}line ${lineOf(text, k.key)}: a key that is not ${k.what}`
    : `${k.named} is not ${k.what}; did you mean ${nearest}?`
}

/** The line where `key` first appears, for a message that must not repeat it. */
function lineOf (text: string, key: string): number {
  const at = text.indexOf(key)
  return at === -1 ? 0 : text.slice(0, at).split('\n').length
}

/** The deepest nesting of flow collections ([ and {), quoted text aside. */
function flowDepth (text: string): number {
  let depth = 0
  let deepest = 0
  let quote: string | undefined
  for (const c of text) {
    if (quote !== undefined) {
      if (c === quote) quote = undefined
    } else if (c === '"' || c === "'") quote = c
    else if (c === '[' || c === '{') deepest = Math.max(deepest, ++depth)
    else if (c === ']' || c === '}') depth = Math.max(0, depth - 1)
    else if (c === '\n') quote = undefined
  }
  return deepest
}

/** A setting's value as a variable holds it; undefined for null (unset), false for what no variable can hold. */
function valueText (value: unknown): string | undefined | false {
  if (value === null) return undefined
  if (typeof value === 'string') return value
  if (typeof value === 'number' || typeof value === 'boolean') return String(value)
  if (Array.isArray(value) && value.every((item) => ['string', 'number'].includes(typeof item))) return value.join(',')
  return false
}

function isMap (value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}
