import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import envSchema from 'env-schema'
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
  tokenUrl: string
  clientId: string
  scope?: string
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
    username: CredentialSource
    password: CredentialSource
    clientSecret?: CredentialSource
  }
  token: {
    timeoutMs: number
    waitMs: number
    retryMinMs: number
    retryMaxMs: number
    rejectedRetryMs: number
  }
  proxy: { host: string, port: number }
  admin: { host: string, port: number }
  logLevel: LogLevel
  shutdownGraceMs: number
  /** corporate egress proxy (HTTPS_PROXY, HTTP_PROXY, NO_PROXY, any case), for the upstream and the auth server */
  egress: { httpProxy?: string, httpsProxy?: string, noProxy?: string }
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

type Raw = Partial<Record<VariableName, string | number>>

export interface LoadOptions {
  /** directory whose `.env` is read; the process's working directory by default */
  cwd?: string
}

/**
 * Reads the configuration from `env` (and `.env`, which `env` overrides),
 * validates it against the schema and the rules between variables, and
 * throws one ConfigError naming every problem. Values are never echoed.
 */
export function loadConfig (env: NodeJS.ProcessEnv, options: LoadOptions = {}): Config {
  const cwd = options.cwd ?? process.cwd()
  const problems: string[] = []
  let raw: Raw

  // An empty variable (`AUTH_CLIENT_SECRET=` in a compose file) means unset.
  const data = Object.fromEntries(Object.entries(env).filter(([name, value]) => name in properties && value !== undefined && value !== ''))
  const read = (overrides: Record<string, undefined>): Raw => envSchema({
    schema: envJsonSchema,
    data: [data, overrides],
    env: false,
    dotenv: { path: resolve(cwd, '.env') }
  }) as Raw
  try {
    raw = read({})
  } catch (err) {
    const errors = (err as { errors?: Array<{ instancePath: string, message?: string, params?: { allowedValues?: unknown[] } }> }).errors
    if (!errors) {
      throw new ConfigError([`.env could not be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`])
    }
    const invalid: Record<string, undefined> = {}
    for (const e of errors) {
      const name = e.instancePath.replace(/^\//, '')
      const allowed = e.params?.allowedValues ? ` (${e.params.allowedValues.join(', ')})` : ''
      problems.push(`${name} ${e.message ?? 'is invalid'}${allowed}`)
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

  const credentials = {
    username: credentialSource('AUTH_USERNAME', 'AUTH_USERNAME_FILE', raw, cwd, problems, true),
    password: credentialSource('AUTH_PASSWORD', 'AUTH_PASSWORD_FILE', raw, cwd, problems, true),
    clientSecret: credentialSource('AUTH_CLIENT_SECRET', 'AUTH_CLIENT_SECRET_FILE', raw, cwd, problems, false)
  }

  let auth: Config['auth'] = { mode: 'basic' }
  if (mode === 'oauth2') {
    let tokenUrl = parseHttpUrl('AUTH_TOKEN_URL', str('AUTH_TOKEN_URL'), problems, false)?.href
    if (tokenUrl === undefined && str('AUTH_TOKEN_URL') === undefined) {
      const authUrl = parseHttpUrl('AUTH_URL', str('AUTH_URL'), problems, false)
      if (authUrl) {
        const base = authUrl.href.replace(/\/+$/, '')
        tokenUrl = `${base}/auth/realms/${encodeURIComponent(str('AUTH_REALM') ?? '')}/protocol/openid-connect/token`
      } else if (str('AUTH_URL') === undefined) {
        problems.push('AUTH_URL is required in oauth2 mode (or set AUTH_TOKEN_URL)')
      }
    }
    const clientId = str('AUTH_CLIENT_ID')
    if (clientId === undefined) problems.push('AUTH_CLIENT_ID is required in oauth2 mode')
    const scope = str('AUTH_SCOPE')
    auth = { mode: 'oauth2', tokenUrl: tokenUrl ?? '', clientId: clientId ?? '', ...(scope !== undefined && { scope }) }
  }

  if (num('TOKEN_RETRY_MAX_MS') < num('TOKEN_RETRY_MIN_MS')) {
    problems.push('TOKEN_RETRY_MAX_MS must be >= TOKEN_RETRY_MIN_MS')
  }

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
      username: credentials.username!,
      password: credentials.password!,
      ...(credentials.clientSecret && { clientSecret: credentials.clientSecret })
    },
    token: {
      timeoutMs: num('TOKEN_TIMEOUT_MS'),
      waitMs: num('TOKEN_WAIT_MS'),
      retryMinMs: num('TOKEN_RETRY_MIN_MS'),
      retryMaxMs: num('TOKEN_RETRY_MAX_MS'),
      rejectedRetryMs: num('TOKEN_REJECTED_RETRY_MS')
    },
    proxy: { host: str('PROXY_HOST')!, port: num('PROXY_PORT') },
    admin: { host: str('ADMIN_HOST')!, port: num('ADMIN_PORT') },
    logLevel: str('LOG_LEVEL') as LogLevel,
    shutdownGraceMs: num('SHUTDOWN_GRACE_MS'),
    egress: egressProxy(env)
  }
}

function egressProxy (env: NodeJS.ProcessEnv): Config['egress'] {
  const pick = (name: string): string | undefined => env[name] || env[name.toLowerCase()] || undefined
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
