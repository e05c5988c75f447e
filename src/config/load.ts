import envSchema from 'env-schema'
import { resolve } from 'node:path'
import { parseAuth } from './auth.js'
import { readConfigFile, type ParseYaml } from './file.js'
import { unknownVariableWarnings } from './names.js'
import { envJsonSchema, properties, type VariableName } from './schema.js'
import { parseForward } from './forward.js'
import { parseRoutes } from './routes.js'
import { tlsNames, tlsPaths } from './tls.js'
import { tracingOf } from './tracing.js'
import type { Config, CredentialConfig, LogLevel, RouteConfig } from './types.js'
import { egressProxy, parseHttpUrl, plainWords, readDotenv, type Raw, type SchemaError } from './values.js'
import { ConfigError } from './errors.js'

export type { ClientAuth, Config, CredentialAuth, CredentialConfig, CredentialSource, CredentialSources, DpopAlgorithm, LogLevel, OAuth2Settings, PrimaryGrant, RouteConfig, TlsPaths, TracingSettings, UpstreamSettings } from './types.js'
export { RESERVED_PARAMS } from './values.js'
export { defaultRouteOf } from './routes.js'

export interface LoadOptions {
  /** directory whose `.env` is read; the process's working directory by default */
  cwd?: string
  /** YAML's parser, for CONFIG_FILE (readConfiguration loads it) */
  parseYaml?: ParseYaml
}

/**
 * The configuration as loadConfig reads it, CONFIG_FILE's parser loaded
 * first when that is set: YAML's parser is loaded only for a file.
 */
export async function readConfiguration (env: NodeJS.ProcessEnv, options: LoadOptions = {}): Promise<Config> {
  const problems: string[] = []
  const dotenv = readDotenv(resolve(options.cwd ?? process.cwd(), '.env'), problems)
  const named = set(env.CONFIG_FILE) ?? set(dotenv.CONFIG_FILE)
  const parseYaml = named === undefined ? undefined : (await import('./yaml.js')).parse as ParseYaml
  // the .env just read is the one used: it may be a pipe that gives its text once, or change in between
  return configFrom(env, { dotenv, problems }, { ...options, ...(parseYaml !== undefined && { parseYaml }) })
}

/**
 * Reads the configuration from `env` and `.env` (the environment wins; an
 * empty value in either means unset), validates it against the schema and
 * the rules between variables, and throws one ConfigError naming every
 * problem. Values are never echoed.
 */
export function loadConfig (env: NodeJS.ProcessEnv, options: LoadOptions = {}): Config {
  const problems: string[] = []
  const dotenv = readDotenv(resolve(options.cwd ?? process.cwd(), '.env'), problems)
  return configFrom(env, { dotenv, problems }, options)
}

/** loadConfig's work on a `.env` already read, with the problems its reading found. */
function configFrom (env: NodeJS.ProcessEnv, dotenvRead: { dotenv: Record<string, string>, problems: string[] }, options: LoadOptions): Config {
  const cwd = options.cwd ?? process.cwd()
  const { dotenv, problems } = dotenvRead
  const warnings: string[] = []

  // the environment wins over the file, the file over .env
  const configFile = set(env.CONFIG_FILE) ?? set(dotenv.CONFIG_FILE)
  let file: Record<string, string> = {}
  if (configFile !== undefined) {
    if (options.parseYaml === undefined) throw new Error('CONFIG_FILE is read by readConfiguration')
    file = readConfigFile(resolve(cwd, configFile), options.parseYaml, problems)
  }
  const merged: Record<string, string> = {}
  for (const source of [dotenv, file, env]) {
    for (const [name, value] of Object.entries(source)) {
      if (value !== undefined && value !== '') merged[name] = value
    }
  }
  delete merged.CONFIG_FILE
  if (dotenv.OTEL_TRACES_EXPORTER !== undefined && env.OTEL_TRACES_EXPORTER === undefined) {
    warnings.push('OTEL_TRACES_EXPORTER in .env has no effect: the OpenTelemetry SDK reads its variables from the environment only; set them there')
  }
  if (dotenv.NODE_EXTRA_CA_CERTS !== undefined && dotenv.NODE_EXTRA_CA_CERTS !== '' && env.NODE_EXTRA_CA_CERTS !== dotenv.NODE_EXTRA_CA_CERTS) {
    warnings.push('NODE_EXTRA_CA_CERTS in .env has no effect: Node.js reads it only when the process starts; set it in the environment')
  }
  warnings.push(...unknownVariableWarnings(Object.keys(merged)))

  const data = Object.fromEntries(Object.entries(merged).filter(([name]) => name in properties))
  const read = (overrides: Record<string, undefined>): Raw => envSchema({
    schema: envJsonSchema,
    data: [data, overrides],
    env: false,
    dotenv: false
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
  const { auth, credentials } = parseAuth(raw, data, cwd, problems, warnings)

  if (num('TOKEN_RETRY_MAX_MS') < num('TOKEN_RETRY_MIN_MS')) {
    problems.push('TOKEN_RETRY_MAX_MS must be >= TOKEN_RETRY_MIN_MS')
  }

  const defaultCredential: CredentialConfig = { name: 'default', auth, sources: credentials }
  const upstreamTls = tlsPaths({ cert: str('UPSTREAM_TLS_CERT_FILE'), key: str('UPSTREAM_TLS_KEY_FILE'), ca: str('UPSTREAM_TLS_CA_FILE'), names: tlsNames('UPSTREAM_TLS') }, cwd, problems)
  if (upstream?.protocol === 'http:' && upstreamTls?.certFile !== undefined) warnings.push('UPSTREAM_TLS_CERT_FILE is not presented: BASE_URL is http')
  const defaultRoute: RouteConfig = {
    name: 'default',
    variables: { baseUrl: 'BASE_URL', port: 'PROXY_PORT' },
    origin: upstream?.origin ?? '',
    basePath: upstream?.pathname.replace(/\/+$/, '') ?? '',
    path: '',
    credential: defaultCredential,
    ...(upstreamTls !== undefined && { tls: upstreamTls })
  }
  const defaultAuth = Object.fromEntries(Object.entries(data).filter(([name]) => name.startsWith('AUTH_')))
  const defaultUpstreamTls = { cert: str('UPSTREAM_TLS_CERT_FILE'), key: str('UPSTREAM_TLS_KEY_FILE'), ca: str('UPSTREAM_TLS_CA_FILE') }
  const routes = parseRoutes({ env: merged, defaultAuth, defaultCredential, defaultRoute, defaultUpstreamTls, proxyPort: num('PROXY_PORT'), adminPort: num('ADMIN_PORT'), cwd }, problems, warnings)

  const allRoutes = [defaultRoute, ...routes]
  const forward = parseForward({
    port: raw.FORWARD_PROXY_PORT === undefined ? undefined : num('FORWARD_PROXY_PORT'),
    caCert: str('FORWARD_PROXY_CA_CERT_FILE'),
    caKey: str('FORWARD_PROXY_CA_KEY_FILE'),
    allow: str('FORWARD_PROXY_ALLOW'),
    routes: allRoutes,
    ports: [['PROXY_PORT', num('PROXY_PORT')], ['ADMIN_PORT', num('ADMIN_PORT')], ...routes.flatMap((r): Array<[string, number]> => r.port === undefined || r.port === 0 ? [] : [[r.variables.port!, r.port]])],
    cwd
  }, problems, warnings)
  if (forward !== undefined && !isLoopback(str('PROXY_HOST'))) warnings.push(`FORWARD_PROXY_PORT listens on PROXY_HOST=${str('PROXY_HOST')}, not a loopback address: whoever reaches it gets the routes' credentials added to their requests`)
  const egress = egressProxy(merged, problems)
  const tracing = tracingOf(env, str('PROXY_HOST')!, [
    { variable: 'PROXY_PORT', port: num('PROXY_PORT') },
    ...routes.flatMap((r) => r.port === undefined ? [] : [{ variable: r.variables.port!, port: r.port }]),
    ...(forward === undefined ? [] : [{ variable: 'FORWARD_PROXY_PORT', port: forward.port }])
  ], problems)
  if (problems.length > 0 || upstream === undefined) throw new ConfigError(problems)

  return {
    upstream: {
      timeoutMs: num('UPSTREAM_TIMEOUT_MS'),
      idleTimeoutMs: num('UPSTREAM_IDLE_TIMEOUT_MS'),
      connections: num('UPSTREAM_CONNECTIONS'),
      keepAliveMs: num('UPSTREAM_KEEPALIVE_MS')
    },
    token: {
      timeoutMs: num('TOKEN_TIMEOUT_MS'),
      waitMs: num('TOKEN_WAIT_MS'),
      retryMinMs: num('TOKEN_RETRY_MIN_MS'),
      retryMaxMs: num('TOKEN_RETRY_MAX_MS'),
      rejectedRetryMs: num('TOKEN_REJECTED_RETRY_MS')
    },
    proxy: { host: str('PROXY_HOST')!, port: num('PROXY_PORT'), maxRequests: num('PROXY_MAX_REQUESTS'), websocketMaxMessageBytes: num('WEBSOCKET_MAX_MESSAGE_BYTES') },
    admin: { host: str('ADMIN_HOST')!, port: num('ADMIN_PORT') },
    bounds: {
      routeMaxRequests: num('PROXY_ROUTE_MAX_REQUESTS') > 0 ? num('PROXY_ROUTE_MAX_REQUESTS') : routes.length > 0 || forward !== undefined ? Math.ceil(num('PROXY_MAX_REQUESTS') / 2) : num('PROXY_MAX_REQUESTS'),
      proxyConnections: num('PROXY_MAX_CONNECTIONS'),
      adminConnections: num('ADMIN_MAX_CONNECTIONS')
    },
    logLevel: str('LOG_LEVEL') as LogLevel,
    accessLog: raw.ACCESS_LOG !== false,
    shutdownGraceMs: num('SHUTDOWN_GRACE_MS'),
    routes: allRoutes,
    ...(forward !== undefined && { forward }),
    egress,
    ...(env.NODE_EXTRA_CA_CERTS !== undefined && env.NODE_EXTRA_CA_CERTS !== '' && { extraCaFile: env.NODE_EXTRA_CA_CERTS }),
    ...(tracing !== undefined && { tracing }),
    ...(configFile !== undefined && { file: { path: resolve(cwd, configFile), overridden: Object.keys(file).filter((name) => set(env[name]) !== undefined).sort() } }),
    variables: merged,
    warnings
  }
}

function set (value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value
}

/** Whether a listening address is reachable from this host only. */
function isLoopback (host: string | undefined): boolean {
  return host === 'localhost' || host === '::1' || (host?.startsWith('127.') ?? false)
}
