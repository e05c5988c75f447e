import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { parseEnv } from 'node:util'
import { Ajv } from 'ajv'
import envSchema from 'env-schema'
import { RESERVED_PARAMS, type ClientAuth, type PrimaryGrant } from '../token/grant.js'
import { envJsonSchema, properties, type VariableName } from './schema.js'

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent'

/** Where one credential comes from: a literal value or a file re-read on change. */
export interface CredentialSource {
  variable: VariableName
  value?: string
  file?: string
}

export interface OAuth2Settings {
  mode: 'oauth2'
  /** undefined: it comes from discovery (issuerUrl) */
  tokenUrl?: string
  /** AUTH_ISSUER_URL: discovery of the token, end-session and revocation endpoints */
  issuerUrl?: string
  /**
   * The same realm's token URL in Keycloak's other layout (with or without
   * `/auth`), tried once should `tokenUrl` not be a token endpoint; only when
   * the URL was derived from AUTH_URL, never when AUTH_TOKEN_URL was given.
   */
  alternateTokenUrl?: string
  grantType: PrimaryGrant
  clientAuth: ClientAuth
  clientId: string
  scope?: string
  /** AUTH_TOKEN_PARAMS, decoded, in order (a name may repeat: RFC 8707 resource) */
  params: Array<[string, string]>
  logoutOnShutdown: boolean
}

export interface Config {
  upstream: {
    /** `scheme://host[:port]`, the only origin the token is ever sent to */
    origin: string
    /** path prefix of BASE_URL without its trailing slash; '' for none */
    basePath: string
    timeoutMs: number
    idleTimeoutMs: number
    connections: number
    keepAliveMs: number
  }
  auth: OAuth2Settings | { mode: 'basic' }
  credentials: {
    /** absent with client_credentials */
    username?: CredentialSource
    password?: CredentialSource
    clientSecret?: CredentialSource
  }
  token: {
    timeoutMs: number
    waitMs: number
    retryMinMs: number
    retryMaxMs: number
    rejectedRetryMs: number
  }
  proxy: { host: string, port: number, maxRequests: number }
  admin: { host: string, port: number }
  logLevel: LogLevel
  accessLog: boolean
  shutdownGraceMs: number
  /** corporate egress proxy (HTTPS_PROXY, HTTP_PROXY, NO_PROXY, any case), for the upstream and the auth server */
  egress: { httpProxy?: string, httpsProxy?: string, noProxy?: string }
  /** things worth telling the operator that do not stop the start (misspelt names, say) */
  warnings: string[]
}

/** Every problem with the configuration, reported together. */
export class ConfigError extends Error {
  readonly problems: readonly string[]
  constructor (problems: string[]) {
    super(`invalid configuration: ${problems.join('; ')}`)
    this.name = 'ConfigError'
    this.problems = problems
  }
}

type Raw = Partial<Record<VariableName, string | number | boolean>>

export interface LoadOptions {
  /** directory whose `.env` is read; the process's working directory by default */
  cwd?: string
}

/** The prefixes of the sidecar's variables: an unknown name with one of them is probably a typo. */
const PREFIXES = [...new Set(Object.keys(properties).map((name) => name.slice(0, name.indexOf('_') + 1)))]

/**
 * Kubernetes injects these for every Service in the namespace: a Service
 * named auth-sidecar gives AUTH_SIDECAR_SERVICE_HOST, AUTH_SIDECAR_PORT_80_TCP
 * and so on. They are no misspellings.
 */
const SERVICE_LINK = /_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT|PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)$/

let validator: Ajv | undefined

/**
 * The Ajv instance env-schema validates with: its own default options, but
 * the schema is not checked against JSON Schema's meta-schema each time the
 * process starts (that check compiled the meta-schema's validator: 11 ms of
 * start-up). The schema is a constant; test/config/load.test.ts checks it
 * against the meta-schema instead. Nor is the generated code optimised: it
 * runs once or twice.
 */
function schemaValidator (): Ajv {
  validator ??= new Ajv({
    allErrors: true,
    removeAdditional: true,
    useDefaults: true,
    coerceTypes: true,
    allowUnionTypes: true,
    addUsedSchema: false,
    validateSchema: false,
    code: { optimize: false }
  })
  return validator
}

/** Variables the sidecar reads besides its schema (any case for the egress proxy ones). */
const EGRESS = ['HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY']

/**
 * Reads the configuration from `env` and `.env` (the environment wins; an
 * empty value in either means unset), validates it against the schema and
 * the rules between variables, and throws one ConfigError naming every
 * problem. Values are never echoed.
 */
export function loadConfig (env: NodeJS.ProcessEnv, options: LoadOptions = {}): Config {
  const cwd = options.cwd ?? process.cwd()
  const problems: string[] = []
  const warnings: string[] = []

  const dotenv = readDotenv(resolve(cwd, '.env'), problems)
  const merged: Record<string, string> = {}
  for (const source of [dotenv, env]) {
    for (const [name, value] of Object.entries(source)) {
      if (value !== undefined && value !== '') merged[name] = value
    }
  }
  if (dotenv.NODE_EXTRA_CA_CERTS !== undefined && dotenv.NODE_EXTRA_CA_CERTS !== '' && env.NODE_EXTRA_CA_CERTS !== dotenv.NODE_EXTRA_CA_CERTS) {
    warnings.push('NODE_EXTRA_CA_CERTS in .env has no effect: Node.js reads it only when the process starts; set it in the environment')
  }
  for (const name of Object.keys(merged)) {
    if (name in properties || !PREFIXES.some((p) => name.startsWith(p)) || SERVICE_LINK.test(name)) continue
    const nearest = nearestName(name)
    warnings.push(`${name} is not a variable of auth-sidecar${nearest === undefined ? '' : `; did you mean ${nearest}?`}`)
  }

  const data = Object.fromEntries(Object.entries(merged).filter(([name]) => name in properties))
  const read = (overrides: Record<string, undefined>): Raw => envSchema({
    schema: envJsonSchema,
    data: [data, overrides],
    env: false,
    dotenv: false,
    ajv: schemaValidator()
  }) as Raw
  let raw: Raw
  try {
    raw = read({})
  } catch (err) {
    const errors = (err as { errors?: SchemaError[] }).errors
    if (!errors) throw err
    const invalid: Record<string, undefined> = {}
    for (const e of errors) {
      const name = e.instancePath.replace(/^\//, '')
      problems.push(`${name} ${plainWords(e)}`)
      invalid[name] = undefined
    }
    // Read again without the invalid values, so that the checks below can
    // report what else is wrong in the same message.
    raw = read(invalid)
  }

  const str = (name: VariableName): string | undefined => {
    const v = raw[name]
    return v === undefined || v === '' ? undefined : String(v)
  }
  const num = (name: VariableName): number => Number(raw[name])

  const upstream = parseHttpUrl('BASE_URL', str('BASE_URL'), problems, true)
  const mode = str('AUTH_MODE') === 'basic' ? 'basic' : 'oauth2'

  const grantType: PrimaryGrant = str('AUTH_GRANT_TYPE') === 'client_credentials' ? 'client_credentials' : 'password'
  const clientAuth: ClientAuth = str('AUTH_CLIENT_AUTH') === 'client_secret_basic' ? 'client_secret_basic' : 'client_secret_post'
  const serviceAccount = mode === 'basic' || grantType === 'password'
  if (!serviceAccount) {
    for (const name of ['AUTH_USERNAME', 'AUTH_USERNAME_FILE', 'AUTH_PASSWORD', 'AUTH_PASSWORD_FILE'] as const) {
      if (raw[name] !== undefined) warnings.push(`${name} is not used by the client_credentials grant (AUTH_GRANT_TYPE)`)
    }
  }
  const secretNeeded = mode === 'oauth2' && (grantType === 'client_credentials' || clientAuth === 'client_secret_basic')
  const credentials = {
    username: serviceAccount ? credentialSource('AUTH_USERNAME', 'AUTH_USERNAME_FILE', raw, cwd, problems, true) : undefined,
    password: serviceAccount ? credentialSource('AUTH_PASSWORD', 'AUTH_PASSWORD_FILE', raw, cwd, problems, true) : undefined,
    clientSecret: credentialSource('AUTH_CLIENT_SECRET', 'AUTH_CLIENT_SECRET_FILE', raw, cwd, problems, false)
  }
  if (secretNeeded && credentials.clientSecret === undefined && raw.AUTH_CLIENT_SECRET === undefined && raw.AUTH_CLIENT_SECRET_FILE === undefined) {
    problems.push(grantType === 'client_credentials'
      ? 'AUTH_CLIENT_SECRET (or AUTH_CLIENT_SECRET_FILE) is required by the client_credentials grant: a confidential client with "Service accounts roles" on'
      : 'AUTH_CLIENT_SECRET (or AUTH_CLIENT_SECRET_FILE) is required by AUTH_CLIENT_AUTH=client_secret_basic')
  }

  let auth: Config['auth'] = { mode: 'basic' }
  if (mode === 'oauth2') {
    let tokenUrl = parseHttpUrl('AUTH_TOKEN_URL', str('AUTH_TOKEN_URL'), problems, false)?.href
    let alternateTokenUrl: string | undefined
    const issuerUrl = parseHttpUrl('AUTH_ISSUER_URL', str('AUTH_ISSUER_URL'), problems, false)?.href
    if (issuerUrl !== undefined && str('AUTH_URL') !== undefined) {
      warnings.push(`AUTH_URL is not used when AUTH_ISSUER_URL is set: the token endpoint comes from ${str('AUTH_TOKEN_URL') === undefined ? 'discovery' : 'AUTH_TOKEN_URL'}`)
    }
    if (tokenUrl === undefined && str('AUTH_TOKEN_URL') === undefined && str('AUTH_ISSUER_URL') === undefined) {
      const authUrl = parseHttpUrl('AUTH_URL', str('AUTH_URL'), problems, false)
      const base = authUrl?.href.replace(/\/+$/, '')
      const realm = encodeURIComponent(str('AUTH_REALM') ?? '')
      if (base !== undefined && /\/realms(\/|$)/.test(authUrl!.pathname)) {
        problems.push('AUTH_URL must be the server\'s base URL, without /realms/...: the realm goes in AUTH_REALM (or set the whole AUTH_TOKEN_URL)')
      } else if (base !== undefined && /\/auth$/.test(base)) {
        problems.push('AUTH_URL must not end in /auth: the sidecar adds /auth/realms/... itself, and tries the layout without /auth should that not answer (or set the whole AUTH_TOKEN_URL)')
      } else if (base !== undefined) {
        tokenUrl = `${base}/auth/realms/${realm}/protocol/openid-connect/token`
        alternateTokenUrl = `${base}/realms/${realm}/protocol/openid-connect/token`
      } else if (str('AUTH_URL') === undefined) {
        problems.push('AUTH_URL is required in oauth2 mode (or set AUTH_ISSUER_URL or AUTH_TOKEN_URL)')
      }
    }
    const clientId = str('AUTH_CLIENT_ID')
    if (clientId === undefined) problems.push('AUTH_CLIENT_ID is required in oauth2 mode')
    const scope = str('AUTH_SCOPE')
    auth = {
      mode: 'oauth2',
      ...(tokenUrl !== undefined && { tokenUrl }),
      ...(issuerUrl !== undefined && { issuerUrl }),
      ...(alternateTokenUrl !== undefined && { alternateTokenUrl }),
      grantType,
      clientAuth,
      clientId: clientId ?? '',
      ...(scope !== undefined && { scope }),
      params: tokenParams(str('AUTH_TOKEN_PARAMS'), problems),
      logoutOnShutdown: raw.AUTH_LOGOUT_ON_SHUTDOWN !== false
    }
  }

  if (num('TOKEN_RETRY_MAX_MS') < num('TOKEN_RETRY_MIN_MS')) {
    problems.push('TOKEN_RETRY_MAX_MS must be >= TOKEN_RETRY_MIN_MS')
  }

  const egress = egressProxy(merged, problems)
  if (problems.length > 0 || upstream === undefined) throw new ConfigError(problems)

  return {
    upstream: {
      origin: upstream.origin,
      basePath: upstream.pathname.replace(/\/+$/, ''),
      timeoutMs: num('UPSTREAM_TIMEOUT_MS'),
      idleTimeoutMs: num('UPSTREAM_IDLE_TIMEOUT_MS'),
      connections: num('UPSTREAM_CONNECTIONS'),
      keepAliveMs: num('UPSTREAM_KEEPALIVE_MS')
    },
    auth,
    credentials: {
      ...(credentials.username && { username: credentials.username }),
      ...(credentials.password && { password: credentials.password }),
      ...(credentials.clientSecret && { clientSecret: credentials.clientSecret })
    },
    token: {
      timeoutMs: num('TOKEN_TIMEOUT_MS'),
      waitMs: num('TOKEN_WAIT_MS'),
      retryMinMs: num('TOKEN_RETRY_MIN_MS'),
      retryMaxMs: num('TOKEN_RETRY_MAX_MS'),
      rejectedRetryMs: num('TOKEN_REJECTED_RETRY_MS')
    },
    proxy: { host: str('PROXY_HOST')!, port: num('PROXY_PORT'), maxRequests: num('PROXY_MAX_REQUESTS') },
    admin: { host: str('ADMIN_HOST')!, port: num('ADMIN_PORT') },
    logLevel: str('LOG_LEVEL') as LogLevel,
    accessLog: raw.ACCESS_LOG !== false,
    shutdownGraceMs: num('SHUTDOWN_GRACE_MS'),
    egress,
    warnings
  }
}

/**
 * AUTH_TOKEN_PARAMS as name/value pairs. Malformed text, a parameter without
 * a name, or one of the sidecar's own is a configuration error, named
 * without its value.
 */
function tokenParams (value: string | undefined, problems: string[]): Array<[string, string]> {
  if (value === undefined) return []
  const pairs: Array<[string, string]> = []
  for (const part of value.split('&')) {
    if (part === '') continue
    const eq = part.indexOf('=')
    const [rawName, rawValue] = eq === -1 ? [part, ''] : [part.slice(0, eq), part.slice(eq + 1)]
    let name: string
    let decoded: string
    try {
      name = decodeURIComponent(rawName.replace(/\+/g, ' '))
      decoded = decodeURIComponent(rawValue.replace(/\+/g, ' '))
    } catch {
      problems.push('AUTH_TOKEN_PARAMS must be name=value pairs joined by &, percent-encoded (a stray % does not decode)')
      return []
    }
    if (name === '' || eq === -1) {
      problems.push('AUTH_TOKEN_PARAMS must be name=value pairs joined by &, e.g. audience=orders-api&resource=https%3A%2F%2Fapi.example.com')
      return []
    }
    if (RESERVED_PARAMS.has(name)) {
      problems.push(`AUTH_TOKEN_PARAMS may not set ${JSON.stringify(name.slice(0, 40))}: the sidecar sets it${name === 'scope' ? ' (use AUTH_SCOPE)' : ''}`)
      continue
    }
    pairs.push([name, decoded])
  }
  return pairs
}

function egressProxy (env: Record<string, string>, problems: string[]): Config['egress'] {
  const pick = (name: string): string | undefined => {
    const set = env[name] !== undefined ? name : env[name.toLowerCase()] !== undefined ? name.toLowerCase() : undefined
    if (set === undefined) return undefined
    const value = env[set]!
    if (name === 'NO_PROXY') return value
    // a malformed proxy URL is named, never echoed: it may carry a password
    let url: URL | undefined
    try { url = new URL(value) } catch {}
    if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '' || !decodable(url.username) || !decodable(url.password)) {
      problems.push(`${set} must be a proxy URL such as http://host:3128 (credentials, if any, as http://user:password@host:3128)`)
      return undefined
    }
    return value
  }
  const httpProxy = pick('HTTP_PROXY')
  const httpsProxy = pick('HTTPS_PROXY')
  const noProxy = pick('NO_PROXY')
  return {
    ...(httpProxy !== undefined && { httpProxy }),
    ...(httpsProxy !== undefined && { httpsProxy }),
    ...(noProxy !== undefined && { noProxy })
  }
}

function parseHttpUrl (name: VariableName, value: string | undefined, problems: string[], required: boolean): URL | undefined {
  if (value === undefined) {
    if (required) problems.push(`${name} is required`)
    return undefined
  }
  let url: URL
  try {
    url = new URL(value)
  } catch {
    problems.push(`${name} must be an absolute http or https URL`)
    return undefined
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    problems.push(`${name} must be an absolute http or https URL`)
    return undefined
  }
  if (url.username !== '' || url.password !== '') {
    problems.push(`${name} must not carry credentials`)
    return undefined
  }
  if (url.search !== '' || url.hash !== '') {
    problems.push(`${name} must not have a query or fragment`)
    return undefined
  }
  return url
}

function credentialSource (
  name: VariableName, fileName: VariableName, raw: Raw, cwd: string, problems: string[], required: boolean
): CredentialSource | undefined {
  const value = raw[name]
  const file = raw[fileName]
  if (value !== undefined && file !== undefined) {
    problems.push(`${name} and ${fileName} are both set; use one`)
    return undefined
  }
  if (file !== undefined) {
    const path = resolve(cwd, String(file))
    try {
      if (readSecretFile(path) === '') problems.push(`${fileName} names an empty file`)
    } catch (err) {
      problems.push(`${fileName} cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`)
    }
    return { variable: name, file: path }
  }
  if (value !== undefined) return { variable: name, value: String(value) }
  if (required) problems.push(`${name} (or ${fileName}) is required`)
  return undefined
}

/** A mounted secret's content, without the trailing newline editors add. */
export function readSecretFile (path: string): string {
  return readFileSync(path, 'utf8').replace(/[\r\n]+$/, '')
}

/** Whether a URL's user or password decodes (a stray `%` would throw wherever it is used). */
function decodable (part: string): boolean {
  try {
    decodeURIComponent(part)
    return true
  } catch {
    return false
  }
}

interface SchemaError {
  instancePath: string
  keyword: string
  message?: string
  params?: { allowedValues?: unknown[], limit?: number, type?: string }
}

/** The validator's complaint in plain words. */
function plainWords (e: SchemaError): string {
  switch (e.keyword) {
    case 'type': return e.params?.type === 'integer' ? 'must be a whole number' : e.params?.type === 'boolean' ? 'must be true or false' : `must be a ${e.params?.type ?? 'value of another type'}`
    case 'minimum': return `must be at least ${e.params?.limit}`
    case 'maximum': return `must be at most ${e.params?.limit}`
    case 'enum': return `must be one of ${(e.params?.allowedValues ?? []).join(', ')}`
    default: return e.message ?? 'is invalid'
  }
}

/** `.env` as name → value; none when the file does not exist. */
function readDotenv (path: string, problems: string[]): Record<string, string> {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code !== 'ENOENT') problems.push(`.env could not be read (${code ?? 'error'})`)
    return {}
  }
  return parseEnv(text) as Record<string, string>
}

/** The sidecar's variable closest to a misspelt `name`, if one is close enough to be meant. */
function nearestName (name: string): string | undefined {
  let best: string | undefined
  let bestDistance = Infinity
  for (const candidate of [...Object.keys(properties), ...EGRESS]) {
    const d = editDistance(name, candidate)
    if (d < bestDistance) {
      best = candidate
      bestDistance = d
    }
  }
  // a dropped suffix (UPSTREAM_TIMEOUT for UPSTREAM_TIMEOUT_MS) is a close match too
  return best !== undefined && (bestDistance <= Math.max(3, Math.floor(name.length / 3)) || best.startsWith(name)) ? best : undefined
}

function editDistance (a: string, b: string): number {
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
