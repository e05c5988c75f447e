import envSchema from 'env-schema'
import { resolve } from 'node:path'
import { clientAuthSettings } from './client-auth.js'
import { unknownVariableWarnings } from './names.js'
import { envJsonSchema, properties, type VariableName } from './schema.js'
import type { ClientAuth, Config, DpopAlgorithm, LogLevel, PrimaryGrant } from './types.js'
import { credentialSource, egressProxy, parseHttpUrl, plainWords, readDotenv, tokenParams, type Raw, type SchemaError } from './values.js'

export type { ClientAuth, Config, CredentialSource, DpopAlgorithm, LogLevel, OAuth2Settings, PrimaryGrant } from './types.js'
export { RESERVED_PARAMS } from './values.js'

/** Every problem with the configuration, reported together. */
export class ConfigError extends Error {
  readonly problems: readonly string[]
  constructor (problems: string[]) {
    super(`invalid configuration: ${problems.join('; ')}`)
    this.name = 'ConfigError'
    this.problems = problems
  }
}

export interface LoadOptions {
  /** directory whose `.env` is read; the process's working directory by default */
  cwd?: string
}

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
  const mode = str('AUTH_MODE') === 'basic' ? 'basic' : 'oauth2'

  const grantType: PrimaryGrant = str('AUTH_GRANT_TYPE') === 'client_credentials' ? 'client_credentials' : 'password'
  const serviceAccount = mode === 'basic' || grantType === 'password'
  if (!serviceAccount) {
    for (const name of ['AUTH_USERNAME', 'AUTH_USERNAME_FILE', 'AUTH_PASSWORD', 'AUTH_PASSWORD_FILE'] as const) {
      if (raw[name] !== undefined) warnings.push(`${name} is not used by the client_credentials grant (AUTH_GRANT_TYPE)`)
    }
  }
  const client = mode === 'oauth2' ? clientAuthSettings(raw, cwd, grantType, problems, warnings) : { clientAuth: 'client_secret_post' as ClientAuth, secretNeeded: false }
  const credentials = {
    username: serviceAccount ? credentialSource('AUTH_USERNAME', 'AUTH_USERNAME_FILE', raw, cwd, problems, true) : undefined,
    password: serviceAccount ? credentialSource('AUTH_PASSWORD', 'AUTH_PASSWORD_FILE', raw, cwd, problems, true) : undefined,
    clientSecret: credentialSource('AUTH_CLIENT_SECRET', 'AUTH_CLIENT_SECRET_FILE', raw, cwd, problems, false)
  }
  if (client.secretNeeded && credentials.clientSecret === undefined && raw.AUTH_CLIENT_SECRET === undefined && raw.AUTH_CLIENT_SECRET_FILE === undefined) {
    problems.push(client.clientAuth !== 'client_secret_post'
      ? `AUTH_CLIENT_SECRET (or AUTH_CLIENT_SECRET_FILE) is required by AUTH_CLIENT_AUTH=${client.clientAuth}`
      : 'AUTH_CLIENT_SECRET (or AUTH_CLIENT_SECRET_FILE) is required by the client_credentials grant: a confidential client with "Service accounts roles" on (or a signed client assertion: AUTH_CLIENT_AUTH=private_key_jwt or federated_jwt)')
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
      clientAuth: client.clientAuth,
      ...(client.keyAlg !== undefined && { clientKeyAlg: client.keyAlg }),
      ...(client.keyId !== undefined && { clientKeyId: client.keyId }),
      clientId: clientId ?? '',
      ...(scope !== undefined && { scope }),
      params: tokenParams(str('AUTH_TOKEN_PARAMS'), problems),
      logoutOnShutdown: raw.AUTH_LOGOUT_ON_SHUTDOWN !== false,
      ...(raw.AUTH_DPOP === true && { dpop: (str('AUTH_DPOP_ALG') ?? 'ES256') as DpopAlgorithm })
    }
  } else if (raw.AUTH_DPOP === true) {
    warnings.push('AUTH_DPOP is not used in basic mode: there is no token to bind')
  }
  if (data.AUTH_DPOP_ALG !== undefined && raw.AUTH_DPOP !== true) warnings.push('AUTH_DPOP_ALG is used only with AUTH_DPOP=true')

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
      ...(credentials.clientSecret && { clientSecret: credentials.clientSecret }),
      ...('clientKey' in client && client.clientKey !== undefined && { clientKey: client.clientKey }),
      ...('clientAssertion' in client && client.clientAssertion !== undefined && { clientAssertion: client.clientAssertion })
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
    logLevel: str('LOG_LEVEL') as LogLevel,
    accessLog: raw.ACCESS_LOG !== false,
    shutdownGraceMs: num('SHUTDOWN_GRACE_MS'),
    egress,
    warnings
  }
}
