import envSchema from 'env-schema'
import { parseAuth, type AuthSettings } from './auth.js'
import { editDistance, inTheirNames } from './names.js'
import { envJsonSchema, properties } from './schema.js'
import type { TlsNames } from './pem.js'
import { tlsNames, tlsPaths } from './tls.js'
import type { CredentialConfig, RouteConfig, TlsPaths } from './types.js'
import { parseHttpUrl, plainWords, type Raw, type SchemaError } from './values.js'

/** The AUTH_* variables: what a route may set for itself, and what it takes from the default route otherwise. */
export const AUTH_VARIABLES = Object.keys(properties).filter((name) => name.startsWith('AUTH_'))

/** A named route's own settings, `ROUTE_<NAME>_<SETTING>`, and what each means (`--help`, `.env.example`, README). */
export const ROUTE_SETTING_DESCRIPTIONS = {
  BASE_URL: 'the route\'s upstream base URL (required); its token is sent to this origin only',
  PATH: 'a path prefix on PROXY_PORT: /billing/x goes to BASE_URL + /x (/billingX is not under it); or',
  PORT: 'its own port on PROXY_HOST, everything on it going to BASE_URL',
  'AUTH_*': 'any AUTH_ variable, for this route alone; the others are the default route\'s, but not its password, client secret or assertion when the route names another auth server, nor then its token, issuer or discovery URL: a route that sets one has its own credential and token; one that sets none shares the default route\'s',
  AUTH_EXCHANGE_AUDIENCE: 'get the route\'s token by token exchange (RFC 8693) of the token it would use otherwise, for this audience',
  AUTH_EXCHANGE_SCOPE: 'the scope asked for in that exchange',
  UPSTREAM_TLS_CERT_FILE: 'a client certificate for its upstream (and _KEY_FILE, _CA_FILE); each of the three not set is the default route\'s'
} as const

/** The route's TLS settings for its upstream, besides the certificate documented above. */
const UPSTREAM_TLS_SETTINGS = ['UPSTREAM_TLS_KEY_FILE', 'UPSTREAM_TLS_CA_FILE']

/** The settings of a named route, longest first: the setting is the longest known one at the end of the variable. */
export const ROUTE_SETTINGS: readonly string[] = [
  ...Object.keys(ROUTE_SETTING_DESCRIPTIONS).filter((setting) => setting !== 'AUTH_*'),
  ...UPSTREAM_TLS_SETTINGS,
  ...AUTH_VARIABLES
].sort((a, b) => b.length - a.length)

/** Kubernetes' service links (a Service named route-x gives ROUTE_X_SERVICE_HOST, ROUTE_X_PORT=tcp://...): not routes. */
const SERVICE_LINK = /_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)$/

const NAME = /^[A-Z0-9_]+$/
/** A path prefix: whole segments of unreserved characters. */
const PATH = /^(\/[A-Za-z0-9\-._~]+)+\/?$/

export interface RouteInput {
  /** every variable set, after `.env` */
  env: Record<string, string>
  /** the default route's AUTH_* values as set (before the schema's defaults) */
  defaultAuth: Record<string, unknown>
  /** the default route's credential */
  defaultCredential: CredentialConfig
  /** the default route */
  defaultRoute: RouteConfig
  /** the default route's UPSTREAM_TLS_* files as set */
  defaultUpstreamTls: { cert?: string | undefined, key?: string | undefined, ca?: string | undefined }
  proxyPort: number
  adminPort: number
  cwd: string
}

/**
 * The named routes (`ROUTE_<NAME>_*`), each with its upstream, where it is
 * served (its own port, or a path prefix on PROXY_PORT), and its
 * credential: its AUTH_* settings over the default route's; routes whose
 * settings come out the same share one credential object, and so one
 * token. A route's name may contain `_`: the setting is the longest known
 * one at the end of the variable. Every mistake is named with its route.
 */
export function parseRoutes (o: RouteInput, problems: string[], warnings: string[]): RouteConfig[] {
  const settings = new Map<string, Record<string, string>>()
  const unknown: string[] = []
  for (const [variable, value] of Object.entries(o.env)) {
    if (!variable.startsWith('ROUTE_') || SERVICE_LINK.test(variable)) continue
    const rest = variable.slice('ROUTE_'.length)
    const setting = ROUTE_SETTINGS.find((s) => rest.endsWith(`_${s}`) && NAME.test(rest.slice(0, -s.length - 1)) && rest.length > s.length + 1)
    if (setting === undefined) {
      unknown.push(variable)
      continue
    }
    if (setting === 'PORT' && /^tcp:\/\//.test(value)) continue // a service link
    const name = rest.slice(0, -setting.length - 1)
    settings.set(name, { ...settings.get(name), [setting]: value })
  }
  for (const variable of unknown) {
    const nearest = nearestRouteVariable(variable, [...settings.keys()])
    problems.push(`${variable} is not a route setting${nearest === undefined ? ' (ROUTE_<NAME>_BASE_URL, _PORT, _PATH, _AUTH_...)' : `; did you mean ${nearest}?`}`)
  }

  const credentials = new Map<string, CredentialConfig>([[keyOf(o.defaultAuth), o.defaultCredential]])
  const routes: RouteConfig[] = []
  for (const [upper, set] of [...settings].sort(byName)) {
    const name = upper.toLowerCase()
    const said = (text: string): string => `route ${name}: ${text}`
    if (upper === 'DEFAULT') {
      problems.push(said('the name is the default route\'s; choose another'))
      continue
    }
    const upstream = parseHttpUrl(`ROUTE_${upper}_BASE_URL` as never, set.BASE_URL, problems, true)
    const where = placeOf(upper, set, o, problems)
    const credential = credentialOf(name, upper, set, o, credentials, problems, warnings)
    const tls = upstreamTlsOf(upper, set, o, problems)
    if (upstream?.protocol === 'http:' && set.UPSTREAM_TLS_CERT_FILE !== undefined) warnings.push(`route ${name}: ROUTE_${upper}_UPSTREAM_TLS_CERT_FILE is not presented: ROUTE_${upper}_BASE_URL is http`)
    if (upstream === undefined || where === undefined || credential === undefined) continue
    const variables = { baseUrl: `ROUTE_${upper}_BASE_URL`, ...('port' in where ? { port: `ROUTE_${upper}_PORT` } : { path: `ROUTE_${upper}_PATH` }) }
    routes.push({ name, variables, origin: upstream.origin, basePath: upstream.pathname.replace(/\/+$/, ''), ...where, credential, ...(tls !== undefined && { tls }) })
  }

  // one route per port and per prefix (the default route has neither of its own)
  const taken = new Map<string, string>()
  for (const route of routes) {
    const [variable, value] = route.port !== undefined ? [route.variables.port!, String(route.port)] : [route.variables.path!, route.path]
    if (route.port === 0) continue
    const place = `${route.port !== undefined ? 'port' : 'prefix'} ${value}`
    const other = taken.get(place)
    if (other !== undefined) problems.push(`route ${route.name}: ${variable}=${value} is ${other}'s too: one route per ${route.port !== undefined ? 'port' : 'prefix'}`)
    else taken.set(place, variable)
  }
  return routes
}

/** Where a route is served: ROUTE_<NAME>_PORT or ROUTE_<NAME>_PATH, exactly one. */
function placeOf (upper: string, set: Record<string, string>, o: RouteInput, problems: string[]): { port: number, path: '' } | { path: string } | undefined {
  const name = upper.toLowerCase()
  if ((set.PORT === undefined) === (set.PATH === undefined)) {
    problems.push(`route ${name}: set exactly one of ROUTE_${upper}_PORT (its own port) and ROUTE_${upper}_PATH (a prefix on PROXY_PORT)`)
    return undefined
  }
  if (set.PORT !== undefined) {
    const port = Number(set.PORT)
    if (!/^\d+$/.test(set.PORT) || port > 65535) {
      problems.push(`ROUTE_${upper}_PORT must be a port number, 0 to 65535`)
      return undefined
    }
    if (port !== 0 && (port === o.proxyPort || port === o.adminPort)) {
      problems.push(`route ${name}: ROUTE_${upper}_PORT is ${port === o.proxyPort ? 'PROXY_PORT' : 'ADMIN_PORT'}; a route's port is its own (or use ROUTE_${upper}_PATH for a prefix on PROXY_PORT)`)
      return undefined
    }
    return { port, path: '' }
  }
  const path = set.PATH!
  if (!PATH.test(path) || path.split('/').some((segment) => segment.includes('..') || segment === '.')) {
    problems.push(`ROUTE_${upper}_PATH must be a path prefix such as /billing: segments of letters, digits and -._~, none of them . or holding ..`)
    return undefined
  }
  return { path: path.replace(/\/+$/, '') }
}

/** A route's upstream TLS files: each of its own, else the default route's (the same object when it sets none). */
function upstreamTlsOf (upper: string, set: Record<string, string>, o: RouteInput, problems: string[]): TlsPaths | undefined {
  const own = (setting: string): string | undefined => set[`UPSTREAM_TLS_${setting}_FILE`]
  if (own('CERT') === undefined && own('KEY') === undefined && own('CA') === undefined) return o.defaultRoute.tls
  const names = tlsNames('UPSTREAM_TLS')
  const pick = (setting: 'CERT' | 'KEY' | 'CA', inherited: string | undefined, field: keyof TlsNames): string | undefined => {
    if (own(setting) === undefined) return inherited
    names[field] = `ROUTE_${upper}_UPSTREAM_TLS_${setting}_FILE`
    return own(setting)
  }
  const d = o.defaultUpstreamTls
  return tlsPaths({ cert: pick('CERT', d.cert, 'cert'), key: pick('KEY', d.key, 'key'), ca: pick('CA', d.ca, 'ca'), names }, o.cwd, problems)
}

/** The credential a route's token comes from: its own AUTH_* over the default's (but for where another server is), by token exchange if it says so. */
function credentialOf (name: string, upper: string, set: Record<string, string>, o: RouteInput, credentials: Map<string, CredentialConfig>, problems: string[], warnings: string[]): CredentialConfig | undefined {
  const own = Object.fromEntries(Object.entries(set).filter(([setting]) => setting.startsWith('AUTH_') && !setting.startsWith('AUTH_EXCHANGE_')))
  const notInherited = serverSettingsNotInherited(own, o.defaultAuth)
  const effective = { ...Object.fromEntries(Object.entries(o.defaultAuth).filter(([setting]) => !notInherited.includes(setting))), ...own }
  const inherited = secretsSentElsewhere(own, o.defaultAuth)
  if (inherited.length > 0) {
    const server = SERVER_SETTINGS.filter((setting) => setting in own).map((setting) => `ROUTE_${upper}_${setting}`).join(', ')
    problems.push(`route ${name}: ${server} names another auth server than the default route's, which would be sent the default route's ${inherited.join(', ')}; set the route's own (${inherited.map((v) => `ROUTE_${upper}_${v}`).join(', ')}, or their _FILE)`)
    return undefined
  }
  // Basic credentials go to the upstream itself: another origin gets the default route's only when it shares its origin
  if (String(effective.AUTH_MODE ?? 'oauth2') === 'basic' && !['AUTH_PASSWORD', 'AUTH_PASSWORD_FILE'].some((v) => v in own) && originOf(set.BASE_URL) !== o.defaultRoute.origin) {
    problems.push(`route ${name}: basic mode would send the default route's user name and password to ROUTE_${upper}_BASE_URL, another origin than BASE_URL's; set the route's own (ROUTE_${upper}_AUTH_USERNAME and ROUTE_${upper}_AUTH_PASSWORD, or their _FILE)`)
    return undefined
  }
  const key = keyOf(effective)
  let base = credentials.get(key)
  if (base === undefined) {
    // its own settings are those it sets to other values than the default route's, and those of its server it takes none of
    const names = setBy(upper, [...new Set([...notInherited, ...Object.keys(own).filter((setting) => own[setting] !== o.defaultAuth[setting])])], o.defaultAuth)
    const parsed = authOf(name, names, effective, o, problems, warnings)
    if (parsed === undefined) return undefined
    base = { name, setBy: names, auth: parsed.auth, sources: parsed.credentials }
    credentials.set(key, base)
  }
  const audience = set.AUTH_EXCHANGE_AUDIENCE
  if (audience === undefined) {
    if (set.AUTH_EXCHANGE_SCOPE !== undefined) problems.push(`route ${name}: ROUTE_${upper}_AUTH_EXCHANGE_SCOPE is used only with ROUTE_${upper}_AUTH_EXCHANGE_AUDIENCE`)
    return base
  }
  if (base.auth.mode !== 'oauth2') {
    problems.push(`route ${name}: token exchange needs a token to exchange; its credential is in basic mode`)
    return undefined
  }
  const exchangeKey = JSON.stringify([key, audience, set.AUTH_EXCHANGE_SCOPE ?? null])
  let exchanged = credentials.get(exchangeKey)
  if (exchanged === undefined) {
    exchanged = { ...base, name, setBy: { ...base.setBy, ...setBy(upper, Object.keys(set).filter((setting) => setting.startsWith('AUTH_EXCHANGE_'))) }, exchange: { subject: base, audience, ...(set.AUTH_EXCHANGE_SCOPE !== undefined && { scope: set.AUTH_EXCHANGE_SCOPE }) } }
    credentials.set(exchangeKey, exchanged)
  }
  return exchanged
}

/**
 * A route's own settings by the variables that set them, each with its
 * _FILE twin (AUTH_PASSWORD for AUTH_PASSWORD_FILE) unless the default
 * route sets that: "AUTH_PASSWORD (or its file)" is the route's.
 */
function setBy (upper: string, settings: string[], inherited: Record<string, unknown> = {}): Record<string, string> {
  const twin = (setting: string): string => setting.endsWith('_FILE') ? setting.slice(0, -'_FILE'.length) : `${setting}_FILE`
  const named = settings.flatMap((setting) => [setting, ...(twin(setting) in inherited ? [] : [twin(setting)])])
  return Object.fromEntries(named.map((setting) => [setting, `ROUTE_${upper}_${setting}`]))
}

/**
 * The AUTH_* part of the schema, made once: env-schema's Ajv keeps every
 * schema object it is given compiled, so one made per call would be compiled
 * again for each route and kept for good at each reload.
 */
const AUTH_SCHEMA = { ...envJsonSchema, properties: Object.fromEntries(AUTH_VARIABLES.map((v) => [v, envJsonSchema.properties[v]])) }

/** A route's AUTH_* settings checked as the default route's are, its problems said with its name. */
function authOf (name: string, names: Record<string, string>, data: Record<string, unknown>, o: RouteInput, problems: string[], warnings: string[]): AuthSettings | undefined {
  const said = (text: string): string => `route ${name}: ${inTheirNames(text, names)}`
  let raw: Raw
  try {
    raw = envSchema({ schema: AUTH_SCHEMA, data, env: false, dotenv: false }) as Raw
  } catch (err) {
    const errors = (err as { errors?: SchemaError[] }).errors
    if (errors === undefined) throw err
    for (const e of errors) problems.push(said(`${e.instancePath.replace(/^\//, '')} ${plainWords(e)}`))
    return undefined
  }
  const own: string[] = []
  const ownWarnings: string[] = []
  const parsed = parseAuth(raw, data, o.cwd, own, ownWarnings)
  problems.push(...own.map(said))
  // what it inherits was warned about for the default route already
  warnings.push(...ownWarnings.filter((w) => !warnings.includes(w)).map(said))
  if (own.length > 0) return undefined
  // its TLS files named by the variables that set them: its own, or the default route's
  const tls = parsed.auth.mode === 'oauth2' ? parsed.auth.tls : undefined
  if (tls !== undefined) {
    tls.names = { cert: inTheirNames(tls.names.cert, names), key: inTheirNames(tls.names.key, names), ca: inTheirNames(tls.names.ca, names) }
  }
  return parsed
}

/** The settings that say which auth server (and realm) a credential's requests go to. */
const SERVER_SETTINGS = ['AUTH_URL', 'AUTH_REALM', 'AUTH_TOKEN_URL', 'AUTH_ISSUER_URL', 'AUTH_DISCOVERY_URL']

/**
 * The settings locating its auth server that a route does not take from the
 * default route once it names another server, for the default's token or
 * issuer URL would win over the one it names: all of them, but AUTH_URL or
 * AUTH_REALM beside its own other of the two (another realm of the same
 * Keycloak, or the same realm on another). A discovery URL alone is the
 * same issuer's document found elsewhere.
 */
function serverSettingsNotInherited (own: Record<string, string>, defaults: Record<string, unknown>): string[] {
  const changed = (setting: string): boolean => setOtherwise(setting, own, defaults)
  if (changed('AUTH_TOKEN_URL') || changed('AUTH_ISSUER_URL')) return SERVER_SETTINGS
  if (changed('AUTH_URL') || changed('AUTH_REALM')) return ['AUTH_TOKEN_URL', 'AUTH_ISSUER_URL', 'AUTH_DISCOVERY_URL']
  return []
}

/** Whether a route sets `setting` to another value than the default route's (unset there counts as empty). */
function setOtherwise (setting: string, own: Record<string, string>, defaults: Record<string, unknown>): boolean {
  return setting in own && own[setting] !== (defaults[setting] ?? '')
}

/** The settings whose values are sent to the auth server as they are: a password, a client secret, an assertion someone else issued. */
const SENT_SECRETS = [
  { variables: ['AUTH_PASSWORD', 'AUTH_PASSWORD_FILE'], sent: (grant: string, _clientAuth: string) => grant === 'password' },
  { variables: ['AUTH_CLIENT_SECRET', 'AUTH_CLIENT_SECRET_FILE'], sent: (_grant: string, clientAuth: string) => ['client_secret_post', 'client_secret_basic', 'client_secret_jwt'].includes(clientAuth) },
  { variables: ['AUTH_CLIENT_ASSERTION_FILE'], sent: (_grant: string, clientAuth: string) => clientAuth === 'federated_jwt' }
]

/**
 * The default route's secrets that a route would send to an auth server of
 * its own naming: a secret goes only to the server it was set beside. A
 * route that names one of a secret's variables chose it.
 */
function secretsSentElsewhere (own: Record<string, string>, defaults: Record<string, unknown>): string[] {
  const elsewhere = SERVER_SETTINGS.some((setting) => setOtherwise(setting, own, defaults))
  if (!elsewhere) return []
  const effective = (setting: string, fallback: string): string => String((setting in own ? own[setting] : defaults[setting]) || fallback)
  if (effective('AUTH_MODE', 'oauth2') !== 'oauth2') return []
  const grant = effective('AUTH_GRANT_TYPE', 'password')
  const clientAuth = effective('AUTH_CLIENT_AUTH', 'client_secret_post')
  const set = (v: string): boolean => defaults[v] !== undefined && defaults[v] !== ''
  return SENT_SECRETS
    .filter(({ variables, sent }) => sent(grant, clientAuth) && !variables.some((v) => v in own) && variables.some(set))
    .map(({ variables }) => variables.find(set)!)
}

function originOf (url: string | undefined): string | undefined {
  try {
    return url === undefined ? undefined : new URL(url).origin
  } catch {
    return undefined
  }
}

/**
 * Orders entries by their names' character codes. The names are ASCII, and
 * localeCompare would map ICU's collation data into every sidecar for it.
 */
function byName ([a]: [string, unknown], [b]: [string, unknown]): number {
  return a < b ? -1 : a > b ? 1 : 0
}

/** A credential's identity: its AUTH_* settings as set, in order. */
function keyOf (auth: Record<string, unknown>): string {
  return JSON.stringify(Object.entries(auth).filter(([, v]) => v !== undefined).sort(byName))
}

/**
 * The route variable closest to a misspelt one, for the route names in use
 * (or any split of the name, in upper case as a name must be); never the
 * variable itself.
 */
function nearestRouteVariable (variable: string, names: string[]): string | undefined {
  const rest = variable.slice('ROUTE_'.length)
  const candidates = new Set(names)
  for (let i = rest.indexOf('_'); i > 0; i = rest.indexOf('_', i + 1)) candidates.add(rest.slice(0, i).toUpperCase())
  let best: string | undefined
  let bestDistance = Infinity
  for (const name of candidates) {
    for (const setting of ROUTE_SETTINGS) {
      const candidate = `ROUTE_${name}_${setting}`
      if (candidate === variable) continue
      const d = editDistance(variable, candidate)
      if (d < bestDistance) {
        best = candidate
        bestDistance = d
      }
    }
  }
  return best !== undefined && bestDistance <= Math.max(3, Math.floor(variable.length / 6)) ? best : undefined
}

/** The default route (BASE_URL, and the AUTH_* settings no route names): the first of every configuration's routes. */
export function defaultRouteOf (config: { readonly routes: readonly RouteConfig[] }): RouteConfig {
  return config.routes[0]!
}
