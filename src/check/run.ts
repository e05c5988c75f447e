import { METHODS } from 'node:http'
import { parseArgs } from 'node:util'
import type { Readable } from 'node:stream'
import { Writable } from 'node:stream'
import { buildApp, type App } from '../app.js'
import { argumentProblem } from '../arguments.js'
import { readConfiguration, type Config, type CredentialConfig } from '../config/load.js'
import type { HeldCredential } from '../token/registry.js'
import { metadataUrl, wellKnownUrl } from '../config/auth.js'
import { errorBody, ERRORS, type ErrorCode } from '../errors.js'
import { createLogger } from '../logger.js'
import type { UpstreamError } from '../proxy/context.js'
import type { Route } from '../route.js'
import { dpopRefusalOf, hasDpopChallenge } from '../token/challenge.js'
import type { GrantReport } from '../token/lifecycle.js'
import { advice, binding, certificateBinding, claims, describeCertificate, describeConfig, lifetimes, printable } from './describe.js'
import { ConfigError } from '../errors.js'
import { inTheirNames } from '../config/names.js'

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
5 upstream (unreachable, failing, a redirect, or it refused the token: 401/403),
6 ending the session.
`
}

interface CheckArgs { path: string, method: string, help: boolean }

/** `check`'s arguments, or what is wrong with them. */
function checkArgs (args: string[]): CheckArgs | string {
  let values
  try {
    values = parseArgs({ args, options: { path: { type: 'string', default: '/' }, method: { type: 'string', default: 'GET' }, help: { type: 'boolean', short: 'h', default: false } } }).values
  } catch (err) {
    return argumentProblem(err)
  }
  if (!values.path.startsWith('/')) return '--path must start with /'
  const method = values.method.toUpperCase()
  // what the proxy forwards: Node's methods but TRACE and CONNECT
  if (!METHODS.includes(method) || method === 'TRACE' || method === 'CONNECT') return '--method must be an HTTP method the proxy forwards, such as GET'
  return { path: values.path, method, help: values.help }
}

export async function runCheck (env: NodeJS.ProcessEnv, args: string[], write: (text: string) => void, cwd?: string): Promise<number> {
  const parsed = checkArgs(args)
  if (typeof parsed !== 'string' && parsed.help) {
    write(checkUsage())
    return CHECK_EXIT.ok
  }
  if (typeof parsed === 'string') {
    write(`auth-sidecar check: ${parsed}; see check --help\n`)
    return CHECK_EXIT.usage
  }

  let config: Config
  try {
    config = await readConfiguration(env, cwd === undefined ? {} : { cwd })
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err
    write(`FAIL configuration: ${err.problems.join('; ')}\n`)
    return CHECK_EXIT.configuration
  }
  write(`ok   configuration: ${describeConfig(config.routes)}\n`)
  if (config.file !== undefined) write(`     file: ${config.file.path}${config.file.overridden.length === 0 ? '' : `; the environment overrides its ${config.file.overridden.join(', ')}`}\n`)
  for (const warning of config.warnings) write(`     note: ${warning}\n`)

  // The sidecar's own components; what they log is not shown (each step says what matters).
  const logger = createLogger('warn', new Writable({ write (_chunk, _encoding, done) { done() } }))
  const app = await buildApp(config, { logger })
  const say = (status: 'ok' | 'FAIL' | 'skip', step: string, text: string): void => {
    write(`${status.padEnd(4)} ${step}: ${printable(app.secrets.scrub(text))}\n`)
  }
  try {
    return await steps(app, config, parsed, say)
  } finally {
    await app.close(0)
  }
}

type Say = (status: 'ok' | 'FAIL' | 'skip', step: string, text: string) => void

/** What the steps read of the configuration: the routes, and the settings their requests are bounded and routed by. */
type CheckSettings = Pick<Config, 'routes' | 'egress' | 'token' | 'upstream'>

/**
 * Every credential's discovery and grant (or exchange), each route's
 * upstream, every session ended; the exit code is the first failing
 * step's. With named routes each line names its route.
 */
async function steps (app: App, config: CheckSettings, args: CheckArgs, say: Say): Promise<number> {
  const named = config.routes.length > 1
  const of = (step: string, route: string): string => named ? `${step} (route ${route})` : step
  // each credential once, with the first route that uses it
  const credentials = new Map<CredentialConfig, HeldCredential>()
  for (const route of app.routes) if (!credentials.has(route.config.credential)) credentials.set(route.config.credential, route.credential)
  let code: number = CHECK_EXIT.ok
  const failed = (step: number): void => { if (code === CHECK_EXIT.ok) code = step }
  // a credential's lines name its route's own variables as they were set,
  // once its secrets are out (a renamed text would hide one from the scrubber)
  const ownSay = (c: CredentialConfig): Say => (status, step, text) => say(status, step, inTheirNames(app.secrets.scrub(text), c.setBy))

  // each client certificate in use: what it is, and whether it can be shown now
  for (const { which, route, files } of app.certificates) {
    const certificate = files.certificate!
    const unusable = files.unusable()
    if (unusable !== undefined) {
      say('FAIL', of(`certificate ${which}`, route), unusable)
      failed(CHECK_EXIT.configuration)
    } else {
      say('ok', of(`certificate ${which}`, route), describeCertificate(certificate))
    }
  }

  // the forward proxy: the CA the application trusts, and what each route intercepts
  if (app.forward !== undefined) {
    const { ca } = app.forward
    const unusable = ca?.unusable()
    if (ca === undefined) say('ok', 'forward proxy', 'no CA: every route is http, nothing is intercepted with TLS')
    else if (unusable !== undefined) {
      say('FAIL', 'forward proxy', unusable)
      failed(CHECK_EXIT.configuration)
    } else say('ok', 'forward proxy', `CA ${describeCertificate(ca.certificate)}`)
    for (const route of app.routes) {
      const { origin, basePath } = route.config
      say('ok', of('forward proxy', route.name), `${origin.startsWith('https:') ? 'CONNECT' : 'requests for'} ${new URL(origin).host}: ${origin}${basePath}/... gets the route's credential`)
    }
  }

  const usable = new Set<CredentialConfig>()
  for (const [c, credential] of credentials) {
    const say = ownSay(c)
    if (credential.kind !== 'oauth2' || c.auth.mode !== 'oauth2') {
      say('skip', of('grant', c.name), 'basic mode has no token endpoint: the credentials go as Authorization: Basic')
      usable.add(c)
      continue
    }
    if (c.exchange !== undefined && !usable.has(c.exchange.subject)) {
      say('skip', of('exchange', c.name), `no token of route ${c.exchange.subject.name} to exchange`)
      continue
    }
    if (c.auth.issuerUrl !== undefined && c.exchange === undefined) {
      try {
        const endpoints = await credential.endpoints()
        const found = [
          c.auth.tokenUrl === undefined ? `token endpoint ${endpoints?.tokenUrl ?? ''}` : `token endpoint ${c.auth.tokenUrl} (AUTH_TOKEN_URL wins)`,
          endpoints?.endSessionUrl === undefined ? 'no end-session endpoint' : `end-session endpoint ${endpoints.endSessionUrl}`,
          ...(endpoints?.revocationUrl === undefined ? [] : [`revocation endpoint ${endpoints.revocationUrl}`]),
          ...(endpoints?.ignored ?? [])
        ]
        // fetched from another address than the issuer's: the issuer it names is said too
        const url = endpoints?.url ?? c.auth.discoveryUrl ?? ''
        const issuer = url === wellKnownUrl(c.auth.issuerUrl) || url === metadataUrl(c.auth.issuerUrl) ? '' : `issuer ${endpoints?.issuer ?? ''}, `
        say('ok', of('discovery', c.name), `${url}: ${issuer}${found.join(', ')}`)
      } catch (err) {
        say('FAIL', of('discovery', c.name), `${(err as Error).message}${advice(err, config.egress, 'auth', c.auth)}`)
        failed(CHECK_EXIT.discovery)
        continue
      }
    }
    const step = c.exchange === undefined ? 'grant' : 'exchange'
    try {
      // one grant now, held as the sidecar would hold it: the upstream step and the session's end use it
      const { grant, set, tokenUrl, clientKey, proofKey } = await credential.grantNow()
      const what = c.exchange === undefined
        ? `${grant} grant at ${tokenUrl} (${clientMode(clientKey, c)})`
        : `token exchange at ${tokenUrl} of route ${c.exchange.subject.name}'s token for audience ${c.exchange.audience}`
      const upstreams = app.routes.filter((r) => r.config.credential === c).map((r) => ({ route: r.name, thumbprint: r.certificate?.files.certificate?.thumbprint }))
      const bound = certificateBinding(set, upstreams)
      say(bound.failed ? 'FAIL' : 'ok', of(step, c.name), `${what}: ${lifetimes(set)}; ${claims(set.accessToken)}${binding(proofKey, set)}${bound.text}`)
      if (bound.failed) failed(CHECK_EXIT.grant)
      usable.add(c)
    } catch (err) {
      say('FAIL', of(step, c.name), `${(err as Error).message}${advice(err, config.egress, 'auth', c.auth)}`)
      failed(CHECK_EXIT.grant)
    }
  }

  // a route whose credential failed has its failure said already
  for (const route of app.routes) {
    if (usable.has(route.config.credential)) failed(await upstreamStep(app, route, config, args, say, of('upstream', route.name)))
  }

  // the sessions opened are ended whatever the upstreams said
  for (const [c, credential] of credentials) {
    if (c.auth.mode !== 'oauth2' || c.exchange !== undefined || !usable.has(c)) continue
    const say = ownSay(c)
    if (!c.auth.logoutOnShutdown) {
      say('skip', of('session', c.name), 'left open: AUTH_LOGOUT_ON_SHUTDOWN=false (Keycloak ends it after SSO Session Idle)')
      continue
    }
    const { outcome, detail } = await credential.endSession(config.token.timeoutMs)
    if (outcome === 'error' || outcome === 'rejected') {
      say('FAIL', of('session', c.name), detail)
      failed(CHECK_EXIT.session)
    } else {
      say(outcome === 'success' ? 'ok' : 'skip', of('session', c.name), detail)
    }
  }
  return code
}

/** The most of an upstream's answer `check` reads: enough to know it came, no more. */
const MAX_BODY_BYTES = 64 * 1024
/** Statuses that refuse what the sidecar sends (its headers, the token's size), not the path asked for. */
const REFUSES_REQUEST = new Set([407, 408, 413, 414, 431])

/**
 * One request through the proxy's own code path (Fastify's inject), its
 * answer read for at most UPSTREAM_TIMEOUT_MS and MAX_BODY_BYTES. The
 * verdict comes from the status: 2xx and a 4xx about the path (404, say)
 * prove the upstream took the token; 401 and 403 refuse it; a redirect
 * (a login page's, typically) proves nothing of the token and fails, as do
 * 5xx and the 4xx that refuse the request itself.
 */
async function upstreamStep (app: App, route: Route, config: Pick<Config, 'upstream' | 'egress'>, args: CheckArgs, say: Say, step: string): Promise<number> {
  const { origin, basePath, path: prefix, name, credential: c } = route.config
  const target = `${origin}${basePath}${args.path === '/' && basePath !== '' ? '' : args.path}`
  const failures: UpstreamError[] = []
  app.events.on('upstream_error', (e) => { if (e.route === name) failures.push(e) })
  const started = performance.now()
  const giveUp = AbortSignal.timeout(config.upstream.timeoutMs + 1_000)
  let res
  try {
    res = await route.listener.inject({ method: args.method as 'GET', url: `${prefix}${args.path === '/' && prefix !== '' ? '' : args.path}`, payloadAsStream: true, signal: giveUp })
  } catch {
    say('FAIL', step, `${args.method} ${target}: no answer within ${config.upstream.timeoutMs} ms (UPSTREAM_TIMEOUT_MS)`)
    return CHECK_EXIT.upstream
  }
  const body = await readSome(res.stream(), giveUp)
  const ms = Math.round(performance.now() - started)
  // the sidecar's own answer, told apart from the upstream's by its exact body
  const own = (Object.keys(ERRORS) as ErrorCode[]).find((code) => body === errorBody(code))
  const dpop = c.auth.mode === 'oauth2' && c.auth.dpop !== undefined
  if (own === undefined && res.statusCode === 401 && dpop) {
    const challenge = res.headers['www-authenticate']
    const refusal = dpopRefusalOf(challenge)
    say('FAIL', step, refusal !== undefined
      ? `${args.method} ${target} answered 401: the upstream refuses the DPoP proof (${refusal}${refusal === 'use_dpop_nonce' ? ', even with the nonce it asked for' : ''}); its clock, or the URL it believes it serves (a proxy in between rewriting the path or host), may differ from the sidecar's`
      : hasDpopChallenge(challenge)
        ? `${args.method} ${target} answered 401: the upstream refuses the DPoP-bound token. Check what it expects (audience, realm, roles)`
        : `${args.method} ${target} answered 401 without a DPoP challenge: the upstream may not take DPoP-bound tokens; set AUTH_DPOP=false if it takes only bearer tokens`)
    return CHECK_EXIT.upstream
  }
  if (own === undefined && (res.statusCode === 401 || res.statusCode === 403)) {
    say('FAIL', step, `${args.method} ${target} answered ${res.statusCode}: the upstream refuses the token. Check what it expects (audience, realm, roles): AUTH_SCOPE, AUTH_TOKEN_PARAMS (audience=...), or the client's mappers`)
    return CHECK_EXIT.upstream
  }
  if (own === 'upstream_unreachable' || own === 'upstream_timeout') {
    const code = failures.at(-1)?.code ?? own
    say('FAIL', step, `${args.method} ${target}: the sidecar answered ${res.statusCode} ${own} (${code})${advice(code, config.egress, 'upstream')}`)
    return CHECK_EXIT.upstream
  }
  if (own !== undefined) {
    say('FAIL', step, `${args.method} ${target}: the sidecar answered ${res.statusCode} ${own}: ${ERRORS[own].message}`)
    return CHECK_EXIT.upstream
  }
  if (res.statusCode >= 500) {
    say('FAIL', step, `${args.method} ${target} answered ${res.statusCode} in ${ms} ms: reached, but failing`)
    return CHECK_EXIT.upstream
  }
  if (REFUSES_REQUEST.has(res.statusCode)) {
    say('FAIL', step, `${args.method} ${target} answered ${res.statusCode} in ${ms} ms: reached, but it refuses the request itself (${res.statusCode === 407 ? 'an egress proxy wants credentials: check HTTPS_PROXY/HTTP_PROXY' : 'its headers or size: a token too large for the upstream, or a proxy in between with smaller limits'})`)
    return CHECK_EXIT.upstream
  }
  if (res.statusCode >= 300 && res.statusCode < 400) {
    say('FAIL', step, `${args.method} ${target} answered ${res.statusCode} in ${ms} ms: ${redirectTo(res.headers.location, target)}, which is not an accepted token: a login page sends there (the upstream may want a browser session, not a token), or --path or BASE_URL names another place than the API's`)
    return CHECK_EXIT.upstream
  }
  if (res.statusCode >= 400) {
    say('ok', step, `${args.method} ${target} answered ${res.statusCode} in ${ms} ms: reached, and the token was not refused (try another --path for a 2xx)`)
    return CHECK_EXIT.ok
  }
  say('ok', step, `${args.method} ${target} answered ${res.statusCode} in ${ms} ms: reached, ${dpop ? 'DPoP-bound token and proof accepted' : 'token accepted'}`)
  return CHECK_EXIT.ok
}

/**
 * Where a redirect points, as `check` says it: the origin only, since the
 * rest of a login page's URL may carry a code or a token.
 */
function redirectTo (location: string | string[] | undefined, target: string): string {
  const value = Array.isArray(location) ? location[0] : location
  if (value === undefined || value === '') return 'a redirect without a Location'
  let url: URL
  try {
    url = new URL(value, target)
  } catch {
    return 'a redirect to a Location that is not a URL'
  }
  if (url.origin === 'null') return `a redirect to a ${url.protocol} URL`
  return url.origin === new URL(target).origin ? `a redirect within ${url.origin}` : `a redirect to ${url.origin}`
}

/** At most MAX_BODY_BYTES of an answer, as text, until `signal` (which also destroys the stream); what is left is not read. */
async function readSome (stream: Readable, signal: AbortSignal): Promise<string> {
  const chunks: Buffer[] = []
  let size = 0
  try {
    for await (const chunk of stream) {
      chunks.push(chunk as Buffer)
      size += (chunk as Buffer).length
      if (size >= MAX_BODY_BYTES || signal.aborted) break
    }
  } catch {}
  stream.destroy()
  return Buffer.concat(chunks).subarray(0, MAX_BODY_BYTES).toString('utf8')
}

/** How the client authenticated, and with which key: `private_key_jwt, key kid ... (ES256)`. */
function clientMode (key: GrantReport['clientKey'], config: CredentialConfig): string {
  const mode = config.auth.mode === 'oauth2' ? config.auth.clientAuth : 'basic'
  return key === undefined ? mode : `${mode}, key kid ${key.kid} (${key.alg})`
}
