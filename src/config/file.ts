import { readFileSync, statSync } from 'node:fs'
import { EGRESS, nearestName } from './names.js'
import { ROUTE_SETTINGS } from './routes.js'
import { properties } from './schema.js'

/** YAML's parse (the `yaml` package), passed in: it is loaded only when CONFIG_FILE is set. */
export type ParseYaml = (text: string, options: { uniqueKeys: boolean, prettyErrors: boolean }) => unknown

/** A route's name in the file: what a variable's `<NAME>` may hold, in either case. */
const ROUTE_NAME = /^[A-Za-z0-9_]+$/
/** A key that can be shown: a name, not a value typed in the wrong place. */
const SHOWN_KEY = /^[A-Za-z0-9_]{1,64}$/
/** The largest file read: a configuration, not a data set. */
const MAX_FILE_BYTES = 1024 * 1024

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
    if (statSync(path).size > MAX_FILE_BYTES) {
      said('is larger than 1 MiB')
      return {}
    }
    text = readFileSync(path, 'utf8')
  } catch (err) {
    said(`cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`)
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
      readRoutes(value, values, said)
      continue
    }
    if (key === 'CONFIG_FILE' || (!(key in properties) && !EGRESS.includes(key))) {
      const nearest = key === 'CONFIG_FILE' ? undefined : nearestName(key)
      if (!SHOWN_KEY.test(key)) said('a key is not a setting\'s name (letters, digits and _)')
      else said(key === 'CONFIG_FILE'
        ? 'CONFIG_FILE is set in the environment only'
        : key.startsWith('ROUTE_')
          ? `${key}: routes go under routes: (routes: {name: {BASE_URL: ..., PATH: ...}})`
          : `${key} is not a setting of auth-sidecar${nearest === undefined ? '' : `; did you mean ${nearest}?`}`)
      continue
    }
    const text = valueText(value)
    if (text === false) said(`${key} must be a value or a list of values`)
    else if (text !== undefined) values[key] = text
  }
  return values
}

function readRoutes (routes: unknown, values: Record<string, string>, said: (text: string) => void): void {
  if (routes === null) return
  if (!isMap(routes)) return said('routes must be a map of route names to their settings')
  for (const [name, settings] of Object.entries(routes)) {
    if (!ROUTE_NAME.test(name) || !SHOWN_KEY.test(name)) {
      said('routes: a route\'s name is letters, digits and _, at most 64')
      continue
    }
    if (!isMap(settings)) {
      said(`routes.${name} must be a map of its settings (BASE_URL, PATH or PORT, AUTH_...)`)
      continue
    }
    for (const [setting, value] of Object.entries(settings)) {
      if (!ROUTE_SETTINGS.includes(setting)) {
        const nearest = nearestName(setting, ROUTE_SETTINGS)
        if (!SHOWN_KEY.test(setting)) {
          said(`routes.${name}: a key is not a setting's name (letters, digits and _)`)
          continue
        }
        said(`routes.${name}.${setting} is not a route setting${nearest === undefined ? ' (BASE_URL, PATH, PORT, AUTH_..., UPSTREAM_TLS_...)' : `; did you mean ${nearest}?`}`)
        continue
      }
      const text = valueText(value)
      if (text === false) said(`routes.${name}.${setting} must be a value or a list of values`)
      else if (text !== undefined) values[`ROUTE_${name.toUpperCase()}_${setting}`] = text
    }
  }
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
