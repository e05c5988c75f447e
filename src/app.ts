import { EventEmitter } from 'node:events'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance } from 'fastify'
import type { Dispatcher } from 'undici'
import type pino from 'pino'
import { buildAdmin } from './admin/server.js'
import { createMetrics, type Metrics } from './admin/metrics.js'
import type { Config, RouteConfig } from './config/load.js'
import { CredentialRegistry, type HeldCredential } from './token/registry.js'
import { createDispatcher, websocketEgress } from './dispatcher.js'
import type { ProxyEvents } from './proxy/context.js'
import { proxyRoute } from './proxy/route.js'
import { buildListener, FORWARDED_METHODS, type Listener } from './proxy/server.js'
import { UpstreamSlots } from './proxy/upstream-slots.js'
import { SecretScrubber } from './secrets.js'
import { systemClock, type Clock } from './token/clock.js'
import { authFetch, MAX_ANSWER_BYTES, type AuthFetch } from './token/http.js'
import { tlsNames } from './config/tls.js'
import { TlsDispatcher } from './tls/dispatchers.js'
import { TlsFileSets, type ConnectTls, type TlsFiles } from './tls/files.js'

export interface AppDeps {
  logger: pino.Logger
  clock?: Clock
  /** replaces the HTTP client of the auth server (tests) */
  fetch?: AuthFetch
  /** replaces the 60 s limit for a client's request headers (tests) */
  headersTimeoutMs?: number
}

export interface App {
  /** the PROXY_PORT listener */
  proxy: FastifyInstance
  admin: FastifyInstance
  /** the default route's credential */
  credential: HeldCredential
  /** every route, the default route first: its settings, its listener and its credential, and the proxy's events */
  routes: Array<{ config: RouteConfig, listener: FastifyInstance, credential: HeldCredential, events: EventEmitter<ProxyEvents> }>
  metrics: Metrics
  /** what happens in the proxy: each answer, each failure of the upstream */
  events: EventEmitter<ProxyEvents>
  /** known secret values (credentials, tokens, a proxy's password), for texts shown to people */
  secrets: SecretScrubber
  /** the client certificates in use: which way (upstream, auth), for which route, and their files */
  certificates: Array<{ which: 'upstream' | 'auth', route: string, files: TlsFiles }>
  /** Starts the token lifecycle and every listener; resolves with their addresses (the routes' with a port of their own by name). */
  listen(): Promise<{ proxy: AddressInfo, admin: AddressInfo, routes: Record<string, AddressInfo> }>
  /**
   * Stops taking requests, lets in-flight ones finish (at most `graceMs`),
   * ends the auth server session when AUTH_LOGOUT_ON_SHUTDOWN allows (within
   * TOKEN_TIMEOUT_MS after that), releases everything. Idempotent.
   */
  close(graceMs?: number): Promise<void>
}

/** A listener could not be opened: names the variable and the address. */
export class ListenError extends Error {
  readonly code: string | undefined
  constructor (variable: string, host: string, port: number, cause: NodeJS.ErrnoException) {
    const why = cause.code === 'EADDRINUSE'
      ? 'is already in use'
      : cause.code === 'EACCES'
        ? 'may not be opened by this user (a port below 1024?)'
        : cause.code === 'EADDRNOTAVAIL' || cause.code === 'ENOTFOUND'
          ? 'is not an address of this host'
          : `cannot be opened (${cause.code ?? cause.message})`
    super(`${variable}: ${host.includes(':') ? `[${host}]` : host}:${port} ${why}; set ${variable} to a free port`, { cause })
    this.name = 'ListenError'
    this.code = cause.code
  }
}

/**
 * The longest an upstream's announced keep-alive is honoured: under the idle
 * timeouts of the load balancers and NAT gateways that drop connections
 * silently (AWS's 350 s, Azure's 4 minutes), where a request on a connection
 * they dropped would wait for UPSTREAM_TIMEOUT_MS.
 */
export const KEEPALIVE_ANNOUNCED_MAX_MS = 60_000

/** Builds the proxy listeners and the admin server without listening. */
export async function buildApp (config: Config, deps: AppDeps): Promise<App> {
  const { logger } = deps
  const secrets = new SecretScrubber()
  for (const proxyUrl of [config.egress.httpProxy, config.egress.httpsProxy]) {
    if (proxyUrl === undefined) continue
    const { username, password } = new URL(proxyUrl)
    secrets.add(decodeURIComponent(password))
    secrets.add(password)
    if (password !== '') secrets.add(decodeURIComponent(username))
  }

  // The TLS files, read once each; a certificate used both ways is one object.
  const tls = new TlsFileSets(logger.child({ component: 'tls' }), config.extraCaFile)
  // The auth server's connections, a set per credential: one credential's
  // hanging requests never hold up another's grants.
  const authConnections: TlsDispatcher[] = []
  const httpFor = (files: TlsFiles | undefined): { fetch: AuthFetch, refusal: () => string | undefined } => {
    if (deps.fetch !== undefined) return { fetch: deps.fetch, refusal: () => undefined }
    const connections = new TlsDispatcher((connect, onTlsError) => createDispatcher(config.egress, undefined, { connections: 2, keepAliveTimeout: 4_000, maxResponseSize: MAX_ANSWER_BYTES }, connect, onTlsError), files)
    authConnections.push(connections)
    return { fetch: authFetch(connections), refusal: () => connections.refusal() }
  }
  const credentials = new CredentialRegistry({ config, httpFor, tls, secrets, clock: deps.clock ?? systemClock, log: logger })
  try {
    for (const route of config.routes) await credentials.of(route.credential)
  } catch (err) {
    await tls.close()
    throw err
  }

  const events = new EventEmitter<ProxyEvents>()
  const metrics = createMetrics(config.routes.map((r) => r.name))
  for (const { config: c, credential } of credentials.all) metrics.watchCredential(c.name, credential, { dpop: c.auth.mode === 'oauth2' && c.auth.dpop !== undefined })
  metrics.watchProxy(events)
  const proxyLog = logger.child({ component: 'proxy' })
  // An access line has fixed fields, none secret; pino's redaction paths
  // cost a sixth of a proxied request's CPU when checked on every line.
  const accessLogger = proxyLog.child({}, { redact: [] })
  if (config.accessLog) events.on('response', (line) => accessLogger.info(line, 'request'))

  // PROXY_PORT serves the default route and the routes with a path; each
  // route with a port of its own has a listener of its own.
  const listen = (route: string): Listener => buildListener({
    route,
    maxRequests: config.proxy.maxRequests,
    ...(deps.headersTimeoutMs !== undefined && { headersTimeoutMs: deps.headersTimeoutMs }),
    log: proxyLog,
    events
  })
  const main = listen('default')
  const own = new Map<RouteConfig, Listener>()
  const upstreams = new Map<RouteConfig, TlsDispatcher>()
  const certificates: Array<{ which: 'upstream' | 'auth', route: string, files: TlsFiles }> = []
  for (const { config: c } of credentials.all) {
    const files = credentials.tlsOf(c)
    if (files?.certificate !== undefined && c.exchange === undefined) certificates.push({ which: 'auth', route: c.name, files })
  }
  for (const route of config.routes) {
    const listener = route.port === undefined ? main : listen(route.name)
    if (route.port !== undefined) own.set(route, listener)
    const credential = await credentials.of(route.credential)
    const files = route.tls === undefined ? undefined : await tls.of(route.tls, route.name === 'default' ? 'upstream' : `upstream (route ${route.name})`, tlsNames(route.tls === config.routes[0]!.tls ? 'UPSTREAM_TLS' : `ROUTE_${route.name.toUpperCase()}_UPSTREAM_TLS`))
    if (files?.certificate !== undefined) certificates.push({ which: 'upstream', route: route.name, files })
    const pool = new TlsDispatcher((connect, onTlsError) => {
      const made = upstreamPool(config, route.origin, connect, onTlsError)
      if (logger.isLevelEnabled('debug')) logConnections(made, proxyLog)
      return made
    }, files, () => credential.current()?.certificate)
    credential.events.on('token', () => pool.retire())
    upstreams.set(route, pool)
    await listener.app.register(proxyRoute, {
      prefix: route.path,
      context: {
        route: {
          name: route.name,
          origin: route.origin,
          host: new URL(route.origin).host,
          basePath: route.basePath,
          prefix: route.path,
          timeoutMs: config.upstream.timeoutMs,
          websocketMaxMessageBytes: config.proxy.websocketMaxMessageBytes
        },
        credential,
        upstream: pool,
        slots: new UpstreamSlots(config.upstream.connections),
        admission: listener.admission,
        log: proxyLog,
        events
      },
      methods: FORWARDED_METHODS,
      websockets: listener.websockets,
      egress: websocketEgress(config.egress, route.origin)
    })
  }

  for (const { which, route, files } of certificates) metrics.watchCertificate(which, route, files)

  // The token lifecycle follows PROXY_PORT's listener: it starts when that
  // is ready, and stops once every listener has drained (the others close
  // first), each session then ended once.
  const held = credentials.all
  main.app.addHook('onReady', async () => {
    await tls.watch()
    for (const { credential } of held) credential.start()
  })
  main.app.addHook('onClose', async () => {
    for (const { credential } of held) credential.stop()
    credentials.close()
    await Promise.all([...upstreams.values()].map(async (pool) => await pool.destroy()))
    // After the drain, one token request per session at most: the sessions
    // are ended even when the drain took the whole grace period.
    await Promise.all(held.map(async ({ config: c, credential }) => {
      if (c.auth.mode === 'oauth2' && c.auth.logoutOnShutdown) await credential.endSession(config.token.timeoutMs)
    }))
    await Promise.all(authConnections.map(async (connections) => await connections.destroy()))
    await tls.close()
  })

  let closing = false
  let closed: Promise<void> | undefined
  const admin = buildAdmin({
    registry: metrics.registry,
    log: logger.child({ component: 'admin' }),
    notReady: () => closing ? { reason: 'shutting down' } : notReady(config, credentials, upstreams)
  })

  async function shutdown (graceMs: number): Promise<void> {
    closing = true
    await Promise.all([...own.values()].map(async (listener) => await drain(listener, graceMs, logger)))
    await drain(main, graceMs, logger)
    await admin.close()
  }

  return {
    proxy: main.app,
    admin,
    credential: await credentials.of(config.routes[0]!.credential),
    routes: config.routes.map((route) => ({ config: route, listener: (own.get(route) ?? main).app, credential: held.find((h) => h.config === route.credential)!.credential, events })),
    metrics,
    events,
    secrets,
    certificates,
    async listen () {
      await admin.listen({ port: config.admin.port, host: config.admin.host, listenTextResolver: (address) => `admin endpoints on ${address}` })
        .catch((err: NodeJS.ErrnoException) => { throw new ListenError('ADMIN_PORT', config.admin.host, config.admin.port, err) })
      const ports: Record<string, AddressInfo> = {}
      for (const [route, listener] of own) {
        const variable = `ROUTE_${route.name.toUpperCase()}_PORT`
        await listener.app.listen({ port: route.port!, host: config.proxy.host, listenTextResolver: (address) => `route ${route.name} on ${address}` })
          .catch((err: NodeJS.ErrnoException) => { throw new ListenError(variable, config.proxy.host, route.port!, err) })
        ports[route.name] = listener.app.server.address() as AddressInfo
      }
      await main.app.listen({ port: config.proxy.port, host: config.proxy.host, listenTextResolver: (address) => `proxy on ${address}` })
        .catch((err: NodeJS.ErrnoException) => { throw new ListenError('PROXY_PORT', config.proxy.host, config.proxy.port, err) })
      return { proxy: main.app.server.address() as AddressInfo, admin: admin.server.address() as AddressInfo, routes: ports }
    },
    close (graceMs = config.shutdownGraceMs) {
      closed ??= shutdown(graceMs)
      return closed
    }
  }
}

/** A route's upstream pool; verifies TLS. */
function upstreamPool (config: Config, origin: string, tls: ConnectTls, onTlsError: (code: string) => void): Dispatcher {
  const { upstream } = config
  return createDispatcher(config.egress, origin, {
    connections: upstream.connections,
    // UPSTREAM_KEEPALIVE_MS when the upstream does not say how long it keeps
    // an idle connection; when it does (`Keep-Alive: timeout=N`), undici
    // keeps it N less 2 s, up to KEEPALIVE_ANNOUNCED_MAX_MS.
    keepAliveTimeout: upstream.keepAliveMs,
    keepAliveMaxTimeout: Math.max(upstream.keepAliveMs, KEEPALIVE_ANNOUNCED_MAX_MS),
    headersTimeout: upstream.timeoutMs,
    bodyTimeout: upstream.idleTimeoutMs
  }, tls, onTlsError)
}

/**
 * Closes a listener: its WebSockets at once; its HTTP connections as they
 * turn idle, those still busy when the grace period ends cut (which aborts
 * their upstream requests). Fastify's close stops accepting and closes idle
 * kept-alive connections; busy ones close once their answer is done (Node
 * answers with `Connection: close` once the server is closing).
 */
async function drain (listener: Listener, graceMs: number, logger: pino.Logger): Promise<void> {
  const server = listener.app.server
  listener.websockets.close()
  const idle = setInterval(() => server.closeIdleConnections(), 100)
  const cut = setTimeout(() => {
    logger.warn({ graceMs }, 'shutdown grace period over: cutting the requests still in progress')
    server.closeAllConnections()
  }, graceMs)
  try {
    await listener.app.close()
  } finally {
    clearInterval(idle)
    clearTimeout(cut)
  }
}

/** Why the sidecar is not ready: the routes whose credential has no valid token, each with its reason. */
function notReady (config: Config, credentials: CredentialRegistry, upstreams: Map<RouteConfig, TlsDispatcher>): { reason: string, routes?: Record<string, string> } | undefined {
  const reasons = new Map<string, string>()
  for (const route of config.routes) {
    const credential = credentials.all.find((c) => c.config === route.credential)!.credential
    const reason = upstreams.get(route)?.unusable() ?? credential.notReadyReason()
    if (reason !== undefined) reasons.set(route.name, reason)
  }
  if (reasons.size === 0) return undefined
  if (config.routes.length === 1) return { reason: reasons.get('default')! }
  return { reason: [...reasons].map(([name, reason]) => `route ${name}: ${reason}`).join('; '), routes: Object.fromEntries(reasons) }
}

/** LOG_LEVEL=debug: the upstream pool's connections as they open, close and fail. */
function logConnections (dispatcher: Dispatcher, log: pino.Logger): void {
  const origin = (o: unknown): string => String((o as URL | string | undefined)?.toString() ?? '')
  dispatcher.on('connect', (o) => log.debug({ event: 'upstream_connection', origin: origin(o) }, 'upstream connection opened'))
  dispatcher.on('disconnect', (o, _targets, err) => log.debug({ event: 'upstream_connection', origin: origin(o), reason: (err as { code?: string }).code ?? err.name }, 'upstream connection closed'))
  dispatcher.on('connectionError', (o, _targets, err) => log.debug({ event: 'upstream_connection', origin: origin(o), reason: (err as { code?: string }).code ?? err.name }, 'upstream connection failed'))
}
