import { METHODS } from 'node:http'
import { Writable } from 'node:stream'
import { buildApp, type App } from './app.js'
import { ConfigError, loadConfig, type Config } from './config/load.js'
import { errorBody, ERRORS, type ErrorCode } from './errors.js'
import { createLogger } from './logger.js'
import { dpopRefusalOf, hasDpopChallenge } from './proxy/dpop-challenge.js'
import { wellKnownUrl } from './token/discovery.js'
import { GrantError, type TokenSet } from './token/grant.js'
import { TokenManager } from './token/manager.js'

/**
 * `node dist/main.js check`: the configuration read exactly as the sidecar
 * reads it, then discovery (if configured), one grant, one request to the
 * upstream through the proxy's own code path (Fastify's inject: no listener
 * is opened), and the session ended. One human line per step; the exit code
 * names the failing step. Nothing secret is printed: not the token, not what
 * a server echoed of the credentials.
 */

/** Exit codes, one per step that can fail. */
export const CHECK_EXIT = { ok: 0, configuration: 1, usage: 2, discovery: 3, grant: 4, upstream: 5, session: 6 } as const

export function checkUsage (): string {
  return `Usage: node dist/main.js check [--path /some/path] [--method GET]

Reads the configuration as the sidecar would, then: discovery (with
AUTH_ISSUER_URL), one grant, one request to the upstream through the proxy's
code path (--path, relative to BASE_URL, default its base path), and ends the
session it opened (unless AUTH_LOGOUT_ON_SHUTDOWN=false). No port is opened.

Exit codes: 0 all passed, 1 configuration, 2 usage, 3 discovery, 4 grant,
5 upstream (unreachable, or it refused the token: 401/403), 6 ending the session.
`
}

interface CheckArgs { path: string, method: string }

function parseArgs (args: string[]): CheckArgs | string {
  const parsed: CheckArgs = { path: '/', method: 'GET' }
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!
    const [name, inline] = arg.includes('=') ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)] : [arg, undefined]
    if (name !== '--path' && name !== '--method') return `unknown argument ${JSON.stringify(arg).slice(0, 80)}`
    const value = inline ?? args[++i]
    if (value === undefined) return `${name} needs a value`
    if (name === '--path') {
      if (!value.startsWith('/')) return '--path must start with /'
      parsed.path = value
    } else {
      const method = value.toUpperCase()
      // what the proxy forwards: Node's methods but TRACE and CONNECT
      if (!METHODS.includes(method) || method === 'TRACE' || method === 'CONNECT') return '--method must be an HTTP method the proxy forwards, such as GET'
      parsed.method = method
    }
  }
  return parsed
}

export async function runCheck (env: NodeJS.ProcessEnv, args: string[], write: (text: string) => void, cwd?: string): Promise<number> {
  if (args.includes('--help') || args.includes('-h')) {
    write(checkUsage())
    return CHECK_EXIT.ok
  }
  const parsed = parseArgs(args)
  if (typeof parsed === 'string') {
    write(`auth-sidecar check: ${parsed}; see check --help\n`)
    return CHECK_EXIT.usage
  }

  let config: Config
  try {
    config = loadConfig(env, cwd === undefined ? {} : { cwd })
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err
    write(`FAIL configuration: ${err.problems.join('; ')}\n`)
    return CHECK_EXIT.configuration
  }
  write(`ok   configuration: ${describeConfig(config)}\n`)
  for (const warning of config.warnings) write(`     note: ${warning}\n`)

  // The sidecar's own components, logging into memory: the upstream step
  // reads why a request failed from there.
  const logged: Array<Record<string, unknown>> = []
  const logger = createLogger('warn', new Writable({
    write (chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n')) {
        if (line !== '') try { logged.push(JSON.parse(line) as Record<string, unknown>) } catch {}
      }
      done()
    }
  }))
  const app = await buildApp(config, { logger })
  const say = (status: 'ok' | 'FAIL' | 'skip', step: string, text: string): void => {
    write(`${status.padEnd(4)} ${step}: ${printable(app.secrets.scrub(text))}\n`)
  }
  try {
    return await steps(app, config, parsed, say, logged)
  } finally {
    await app.close(0)
  }
}

type Say = (status: 'ok' | 'FAIL' | 'skip', step: string, text: string) => void

async function steps (app: App, config: Config, args: CheckArgs, say: Say, logged: Array<Record<string, unknown>>): Promise<number> {
  const tokens = app.tokens
  if (config.auth.mode === 'oauth2' && tokens instanceof TokenManager) {
    if (config.auth.issuerUrl !== undefined) {
      try {
        const endpoints = await tokens.discover()
        const found = [
          config.auth.tokenUrl === undefined ? `token endpoint ${endpoints?.tokenUrl ?? ''}` : `token endpoint ${config.auth.tokenUrl} (AUTH_TOKEN_URL wins)`,
          endpoints?.endSessionUrl === undefined ? 'no end-session endpoint' : `end-session endpoint ${endpoints.endSessionUrl}`,
          ...(endpoints?.revocationUrl === undefined ? [] : [`revocation endpoint ${endpoints.revocationUrl}`])
        ]
        say('ok', 'discovery', `${wellKnownUrl(config.auth.issuerUrl)}: ${found.join(', ')}`)
      } catch (err) {
        say('FAIL', 'discovery', `${(err as Error).message}${advice(err, config, 'auth')}`)
        return CHECK_EXIT.discovery
      }
    }
    try {
      const { grant, tokenUrl, set } = await tokens.grantOnce()
      say('ok', 'grant', `${grant} grant at ${tokenUrl} (${await clientMode(tokens, config)}): ${lifetimes(set)}; ${claims(set.accessToken)}${binding(tokens, set)}`)
    } catch (err) {
      say('FAIL', 'grant', `${(err as Error).message}${advice(err, config, 'auth')}`)
      return CHECK_EXIT.grant
    }
  } else {
    say('skip', 'grant', 'basic mode has no token endpoint: the credentials go as Authorization: Basic')
  }

  const upstream = await upstreamStep(app, config, args, say, logged)

  // the session it opened is ended whatever the upstream said
  if (config.auth.mode !== 'oauth2') return upstream
  if (!config.auth.logoutOnShutdown) {
    say('skip', 'session', 'left open: AUTH_LOGOUT_ON_SHUTDOWN=false (Keycloak ends it after SSO Session Idle)')
    return upstream
  }
  const { outcome, detail } = await tokens.endSession(config.token.timeoutMs)
  if (outcome === 'error' || outcome === 'rejected') {
    say('FAIL', 'session', detail)
    return upstream === CHECK_EXIT.ok ? CHECK_EXIT.session : upstream
  }
  say(outcome === 'success' ? 'ok' : 'skip', 'session', detail)
  return upstream
}

/** One request through the proxy's own code path (Fastify's inject); any 2xx-4xx but 401/403 counts as reached. */
async function upstreamStep (app: App, config: Config, args: CheckArgs, say: Say, logged: Array<Record<string, unknown>>): Promise<number> {
  const target = `${config.upstream.origin}${config.upstream.basePath}${args.path === '/' && config.upstream.basePath !== '' ? '' : args.path}`
  const started = performance.now()
  const res = await app.proxy.inject({ method: args.method as 'GET', url: args.path })
  const ms = Math.round(performance.now() - started)
  // the sidecar's own answer, told apart from the upstream's by its exact body
  const own = (Object.keys(ERRORS) as ErrorCode[]).find((code) => res.body === errorBody(code))
  const dpop = config.auth.mode === 'oauth2' && config.auth.dpop !== undefined
  if (own === undefined && res.statusCode === 401 && dpop) {
    const challenge = res.headers['www-authenticate']
    const refusal = dpopRefusalOf(challenge)
    say('FAIL', 'upstream', refusal !== undefined
      ? `${args.method} ${target} answered 401: the upstream refuses the DPoP proof (${refusal}${refusal === 'use_dpop_nonce' ? ', even with the nonce it asked for' : ''}); its clock, or the URL it believes it serves (a proxy in between rewriting the path or host), may differ from the sidecar's`
      : hasDpopChallenge(challenge)
        ? `${args.method} ${target} answered 401: the upstream refuses the DPoP-bound token. Check what it expects (audience, realm, roles)`
        : `${args.method} ${target} answered 401 without a DPoP challenge: the upstream may not take DPoP-bound tokens; set AUTH_DPOP=false if it takes only bearer tokens`)
    return CHECK_EXIT.upstream
  }
  if (own === undefined && (res.statusCode === 401 || res.statusCode === 403)) {
    say('FAIL', 'upstream', `${args.method} ${target} answered ${res.statusCode}: the upstream refuses the token. Check what it expects (audience, realm, roles): AUTH_SCOPE, AUTH_TOKEN_PARAMS (audience=...), or the client's mappers`)
    return CHECK_EXIT.upstream
  }
  if (own === 'upstream_unreachable' || own === 'upstream_timeout') {
    const failure = [...logged].reverse().find((l) => l.msg === 'upstream request failed')
    const code = typeof failure?.upstreamError === 'string' ? failure.upstreamError : own
    say('FAIL', 'upstream', `${args.method} ${target}: the sidecar answered ${res.statusCode} ${own} (${code})${advice(code, config, 'upstream')}`)
    return CHECK_EXIT.upstream
  }
  if (own !== undefined) {
    say('FAIL', 'upstream', `${args.method} ${target}: the sidecar answered ${res.statusCode} ${own}: ${ERRORS[own].message}`)
    return CHECK_EXIT.upstream
  }
  if (res.statusCode >= 500) {
    say('FAIL', 'upstream', `${args.method} ${target} answered ${res.statusCode} in ${ms} ms: reached, but failing`)
    return CHECK_EXIT.upstream
  }
  say('ok', 'upstream', `${args.method} ${target} answered ${res.statusCode} in ${ms} ms: reached, ${dpop ? 'DPoP-bound token and proof accepted' : 'token accepted'}`)
  return CHECK_EXIT.ok
}

/** How the client authenticated, and with which key: `private_key_jwt, key kid ... (ES256)`. */
async function clientMode (tokens: TokenManager, config: Config): Promise<string> {
  const mode = config.auth.mode === 'oauth2' ? config.auth.clientAuth : 'basic'
  const key = await tokens.clientKey()
  return key === undefined ? mode : `${mode}, key kid ${key.kid} (${key.alg})`
}

/** In DPoP mode: the token's type and the key it is bound to (`cnf.jkt`, when the token is a JWT that says). */
function binding (tokens: TokenManager, set: TokenSet): string {
  const key = tokens.dpopKey
  if (key === undefined) return ''
  const jkt = payloadOf(set.accessToken)?.cnf
  const named = typeof jkt === 'object' && jkt !== null ? (jkt as { jkt?: unknown }).jkt : undefined
  const bound = named === undefined ? '' : named === key.thumbprint ? ', its cnf.jkt names it' : ', but its cnf.jkt names another key'
  return `; token_type ${set.tokenType}, bound to the sidecar's ${key.alg} key ${key.thumbprint}${bound}`
}

function describeConfig (config: Config): string {
  const upstream = config.upstream.origin + config.upstream.basePath
  if (config.auth.mode === 'basic') return `basic mode, upstream ${upstream}`
  const a = config.auth
  const endpoint = a.tokenUrl !== undefined ? `token URL ${a.tokenUrl}` : `issuer ${a.issuerUrl ?? ''}`
  const params = a.params.length === 0 ? '' : `, extra parameters ${a.params.map(([n]) => n).join(', ')}`
  const dpop = a.dpop === undefined ? '' : `, DPoP-bound tokens (${a.dpop} key)`
  return `oauth2, ${a.grantType} grant as client ${a.clientId} (${a.clientAuth})${dpop}, ${endpoint}${params}, upstream ${upstream}`
}

function lifetimes (set: TokenSet): string {
  const refresh = set.refreshToken === undefined
    ? 'no refresh token (renewal is a new grant)'
    : set.refreshExpiresInMs === undefined ? 'a refresh token without a fixed lifetime' : `a refresh token for ${Math.round(set.refreshExpiresInMs / 1000)} s`
  return `access token for ${Math.round(set.expiresInMs / 1000)} s, ${refresh}`
}

/** What an operator checks in a token (issuer, audience, scope, expiry), read from a JWT's payload; never the token. */
function claims (token: string): string {
  const payload = payloadOf(token)
  if (payload === undefined) return 'the access token is opaque (not a JWT): its claims are not shown'
  const text = (v: unknown): string => Array.isArray(v) ? v.filter((x) => typeof x === 'string').join(', ') : typeof v === 'string' ? v : 'none'
  const exp = typeof payload.exp === 'number' && Number.isFinite(payload.exp) && Math.abs(payload.exp) < 1e11
    ? new Date(payload.exp * 1000).toISOString()
    : 'none'
  return `issuer ${text(payload.iss)}, audience ${text(payload.aud)}, scope "${text(payload.scope)}", expires ${exp}`
}

/** A JWT's payload, unverified (for what `check` shows), or undefined for an opaque token. */
function payloadOf (token: string): Record<string, unknown> | undefined {
  const parts = token.split('.')
  if (parts.length !== 3) return undefined
  try {
    const parsed = JSON.parse(Buffer.from(parts[1]!, 'base64url').toString('utf8')) as unknown
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) return parsed as Record<string, unknown>
  } catch {}
  return undefined
}

const TLS_CODES = /CERT|SELF_SIGNED|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER|ERR_TLS|ERR_SSL|EPROTO/
const NETWORK_CODES = /ECONNREFUSED|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ECONNRESET|UND_ERR_CONNECT_TIMEOUT|UND_ERR_SOCKET|timed out|upstream_unreachable|upstream_timeout|UND_ERR_HEADERS_TIMEOUT/

/** What to change, for a failed step: credentials, URLs, TLS trust or the egress proxy. */
function advice (failure: unknown, config: Config, side: 'auth' | 'upstream'): string {
  const message = failure instanceof Error ? failure.message : String(failure)
  const proxy = config.egress.httpsProxy !== undefined || config.egress.httpProxy !== undefined
  if (TLS_CODES.test(message)) {
    return '. TLS trust: the server\'s certificate is not trusted here; give its CA to Node.js with NODE_EXTRA_CA_CERTS=/path/ca.pem in the environment (not in .env)'
  }
  if (failure instanceof GrantError && failure.kind === 'rejected' && config.auth.mode === 'oauth2') {
    // Keycloak answers a wrong client secret with unauthorized_client too:
    // its description tells the two apart, and the message already names a
    // setting when it knows one.
    if (/: turn on|pending required actions/.test(message)) return ''
    switch (failure.oauthError) {
      case 'invalid_grant': return config.auth.grantType === 'password' && /credentials/i.test(message) ? '. Check AUTH_USERNAME and AUTH_PASSWORD (or their files)' : ''
      case 'invalid_client':
      case 'unauthorized_client': return `. Check AUTH_CLIENT_ID and AUTH_CLIENT_SECRET${config.auth.clientAuth === 'client_secret_basic' ? ', and whether the server takes client_secret_basic (AUTH_CLIENT_AUTH)' : ''}`
      default: return ''
    }
  }
  if (failure instanceof GrantError && failure.kind === 'wrong_url') {
    return config.auth.mode === 'oauth2' && config.auth.issuerUrl !== undefined && /^discovery/.test(message)
      ? ''
      : '. Check AUTH_URL and AUTH_REALM, or set AUTH_ISSUER_URL or AUTH_TOKEN_URL'
  }
  if (NETWORK_CODES.test(message)) {
    const where = side === 'auth' ? 'the auth server' : 'the upstream (BASE_URL)'
    return proxy
      ? `. ${where} cannot be reached through the egress proxy: check HTTPS_PROXY/HTTP_PROXY and NO_PROXY`
      : `. ${where} cannot be reached from here: check the URL, DNS and firewalls (or set HTTPS_PROXY if egress goes through a proxy)`
  }
  return ''
}

/** One line, printable: what a server said cannot move the cursor or colour the terminal. */
function printable (text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, '?')
}
