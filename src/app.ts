import { EventEmitter } from 'node:events'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance } from 'fastify'
import type pino from 'pino'
import { buildAdmin } from './admin/server.js'
import { boundConnections, descriptorLimit, fitConnections } from './connections.js'
import { createMetrics, type Metrics } from './admin/metrics.js'
import type { Config } from './config/load.js'
import type { ProxyEvents } from './proxy/context.js'
import type { ForwardCa } from './forward/ca.js'
import type { ForwardProxy } from './forward/proxy.js'
import { RequestBudget } from './proxy/request-budget.js'
import { buildListener, type Listener } from './proxy/server.js'
import type { Route, CertificateInUse } from './route.js'
import { RouteSet, type Applied } from './route-set.js'
import { SecretScrubber } from './secrets.js'
import { systemClock, type Clock } from './token/clock.js'
import type { AuthFetch } from './token/http.js'
import { CredentialRegistry, type HeldCredential } from './token/registry.js'
import { TlsFileSets } from './tls/files.js'
import { NO_TRACING, type Tracing } from './tracing/tracing.js'
import { ListenError } from './errors.js'

export { KEEPALIVE_ANNOUNCED_MAX_MS } from './route.js'

export interface AppDeps {
  logger: pino.Logger
  clock?: Clock
  /** replaces the HTTP client of the auth server (tests) */
  fetch?: AuthFetch
  /** replaces the 60 s limit for a client's request headers (tests) */
  headersTimeoutMs?: number
  /** spans for requests and grants (startTracing's); none by default */
  tracing?: Tracing
  /** replaces the process's file descriptor limit that the connection bounds fit in (tests); null: none */
  descriptorLimit?: number | null
}

export interface App {
  /** the PROXY_PORT listener */
  proxy: FastifyInstance
  admin: FastifyInstance
  /** the default route's credential */
  readonly credential: HeldCredential
  /** every route in use, the default route first */
  readonly routes: readonly Route[]
  metrics: Metrics
  /** what happens in the proxy: each answer, each failure of the upstream */
  events: EventEmitter<ProxyEvents>
  /** known secret values (credentials, tokens, a proxy's password), for texts shown to people */
  secrets: SecretScrubber
  /** the client certificates in use: the credentials' to the auth server, then the routes' to their upstreams */
  certificates: CertificateInUse[]
  /** the forward proxy and its CA, when FORWARD_PROXY_PORT is set */
  forward?: { proxy: ForwardProxy, ca: ForwardCa | undefined }
  /** Starts the token lifecycle and every listener; resolves with their addresses (the routes' with a port of their own by name). */
  listen(): Promise<{ proxy: AddressInfo, admin: AddressInfo, routes: Record<string, AddressInfo>, forward?: AddressInfo }>
  /**
   * Applies a new version of the configuration: the routes it adds, removes
   * or changes, each credential whose settings did not change kept with its
   * token, and ACCESS_LOG; resolves with what changed, and
   * the settings that wait for a restart.
   */
  apply(next: Config): Promise<Applied>
  /**
   * Stops taking requests, lets in-flight ones finish (at most `graceMs`),
   * ends the auth server sessions when AUTH_LOGOUT_ON_SHUTDOWN allows
   * (within TOKEN_TIMEOUT_MS after that), releases everything. Idempotent.
   */
  close(graceMs?: number): Promise<void>
}

/**
 * Builds the sidecar without listening: what every route shares (the
 * credentials and TLS files, the proxy's events, the metrics), then each
 * route on its listener (PROXY_PORT's, or its own port's), then the admin
 * server. Closing undoes it in one order: the listeners drain, the
 * credentials stop and end their sessions, the routes' connections close,
 * the files are no longer watched.
 */
export async function buildApp (config: Config, deps: AppDeps): Promise<App> {
  const { logger } = deps
  const secrets = egressSecrets(config.egress)
  const tls = new TlsFileSets(logger.child({ component: 'tls' }), config.extraCaFile)
  const tracing = deps.tracing ?? NO_TRACING
  const credentials = new CredentialRegistry({ config, tls, secrets, clock: deps.clock ?? systemClock, log: logger, tracing, ...(deps.fetch !== undefined && { fetch: deps.fetch }) })
  const events = new EventEmitter<ProxyEvents>()
  const proxyLog = logger.child({ component: 'proxy' })
  const routeDeps = { config, credentials, tls, events, log: proxyLog, tracing }
  const budget = new RequestBudget(config.proxy.maxRequests, config.bounds.routeMaxRequests)

  // PROXY_PORT serves the default route and the routes with a path; each
  // route with a port of its own has a listener of its own.
  const listen = (route: string): Listener => buildListener({
    route,
    budget,
    ...(deps.headersTimeoutMs !== undefined && { headersTimeoutMs: deps.headersTimeoutMs }),
    log: proxyLog,
    events,
    tracing
  })
  const main = listen('default')
  const own = new Map<string, Listener>()
  for (const c of config.routes) if (c.port !== undefined) own.set(c.name, listen(c.name))
  let routeSet: RouteSet
  try {
    routeSet = await RouteSet.build({ main, own, deps: routeDeps })
  } catch (err) {
    await credentials.close()
    await tls.close()
    throw err
  }
  const routes = routeSet.all
  // The forward proxy's modules (and the certificate library) load only when it is on.
  let forward: App['forward']
  const servers: Array<() => FastifyInstance> = []
  if (config.forward !== undefined) {
    const settings = config.forward
    const { ForwardCa } = await import('./forward/ca.js')
    const { ForwardProxy } = await import('./forward/proxy.js')
    const ca = settings.ca === undefined ? undefined : await ForwardCa.load(settings.ca, logger.child({ component: 'forward' }))
    const proxy = new ForwardProxy({
      upstream: config.upstream,
      settings,
      ca,
      routes,
      listener: { budget, ...(deps.headersTimeoutMs !== undefined && { headersTimeoutMs: deps.headersTimeoutMs }), log: proxyLog, events, tracing },
      ownPorts: () => servers.map((server) => (server().server.address() as AddressInfo | null)?.port ?? 0)
    })
    routeSet.serveForward(proxy)
    forward = { proxy, ca }
  }
  const certificates = [...credentials.certificates, ...routes.flatMap((route) => route.certificate === undefined ? [] : [route.certificate])]

  const metrics = createMetrics(routes.map((route) => route.name))
  // each credential and its certificate to the auth server, watched until it stops
  const watched = new Map<HeldCredential, () => void>()
  const watchCredentials = (): void => {
    for (const { config: c, credential, tls } of credentials.all) {
      if (watched.has(credential)) continue
      watched.set(credential, every([
        metrics.watchCredential(c.name, credential, { dpop: c.auth.mode === 'oauth2' && c.auth.dpop !== undefined }),
        ...(tls?.certificate === undefined ? [] : [metrics.watchCertificate('auth', c.name, tls)])
      ]))
    }
  }
  watchCredentials()
  metrics.watchProxy(events)
  if (forward !== undefined) metrics.watchForwardProxy(events)
  // each route's name and certificate, watched until it retires
  const unwatchRoutes = new Map<Route, () => void>()
  const watchRoutes = (): void => {
    for (const route of routeSet.all) {
      if (unwatchRoutes.has(route)) continue
      unwatchRoutes.set(route, every([metrics.watchRoute(route.name), ...(route.certificate === undefined ? [] : [metrics.watchCertificate('upstream', route.name, route.certificate.files)])]))
    }
  }
  watchRoutes()
  // An access line has fixed fields, none secret; pino's redaction paths
  // cost a sixth of a proxied request's CPU when checked on every line.
  const accessLogger = proxyLog.child({}, { redact: [] })
  let accessLog = config.accessLog
  events.on('response', (line) => { if (accessLog) accessLogger.info(line, 'request') })

  let closing = false
  const admin = buildAdmin({
    registry: metrics.registry,
    log: logger.child({ component: 'admin' }),
    notReady: () => closing ? { reason: 'shutting down' } : notReady(routeSet.all, forward?.ca?.unusable())
  })
  servers.push(() => main.app, () => admin, ...[...own.values()].map((listener) => () => listener.app))
  if (forward !== undefined) servers.push(() => forward.proxy.listener.app)
  boundListeners(config, deps, logger, metrics, [
    ['PROXY_PORT', main],
    ...[...own].map(([name, listener]): [string, Listener] => [config.routes.find((r) => r.name === name)!.variables.port!, listener]),
    ...(forward !== undefined ? [['FORWARD_PROXY_PORT', forward.proxy.listener] as [string, Listener]] : [])
  ], admin)

  // The token lifecycles follow PROXY_PORT's listener: they start when it is ready.
  main.app.addHook('onReady', async () => {
    await tls.watch()
    forward?.ca?.watch()
    credentials.start()
  })

  let applying: Promise<unknown> = Promise.resolve()
  /** What closing does, in order. */
  async function shutdown (graceMs: number): Promise<void> {
    closing = true
    // a new version being applied is finished first, so that what it made is closed too
    await applying
    if (forward !== undefined) {
      forward.proxy.cutTunnels()
      await drain(forward.proxy.listener, graceMs, logger)
      await forward.proxy.close()
    }
    await Promise.all([...own.values()].map(async (listener) => await drain(listener, graceMs, logger)))
    await drain(main, graceMs, logger)
    await admin.close()
    await credentials.close()
    await routeSet.close()
    await tls.close()
    forward?.ca?.close()
  }

  /** while a version is applied: the credentials it has made are held by no route yet */
  let applyingVersion = false
  /** A new version of the configuration, applied (one at a time). */
  async function apply (next: Config): Promise<Applied> {
    applyingVersion = true
    // the credentials a version that failed to apply made are stopped with the unused ones
    const { applied } = await routeSet.apply(next, retired).finally(() => { applyingVersion = false; release() })
    await tls.watch()
    accessLog = next.accessLog
    return applied
  }
  /**
   * A route left out, its requests done: its certificate's series goes, and
   * credentials it alone held stop; its name's series go unless a route or
   * credential in use still carries the name.
   */
  function retired (route: Route): void {
    release()
    unwatchRoutes.get(route)?.()
    unwatchRoutes.delete(route)
  }
  /**
   * Stops the credentials no route holds any more (a route left out holds
   * its own until its requests are done). What the routes in use hold is
   * watched first: a route left out can retire before `apply` resumes, and
   * the name it shares with its successor must keep its series.
   */
  function release (): void {
    if (closing) return
    watchRoutes()
    watchCredentials()
    // a route of an earlier version that retires meanwhile leaves the stopping to the version's end
    if (applyingVersion) return
    for (const credential of credentials.retain(routeSet.credentials)) {
      watched.get(credential)?.()
      watched.delete(credential)
    }
  }

  let closed: Promise<void> | undefined
  return {
    proxy: main.app,
    admin,
    get credential () { return routeSet.all[0]!.credential },
    get routes () { return routeSet.all },
    metrics,
    events,
    secrets,
    certificates,
    ...(forward !== undefined && { forward }),
    async listen () {
      await admin.listen({ port: config.admin.port, host: config.admin.host, listenTextResolver: (address) => `admin endpoints on ${address}` })
        .catch((err: NodeJS.ErrnoException) => { throw new ListenError('ADMIN_PORT', config.admin.host, config.admin.port, err) })
      const ports: Record<string, AddressInfo> = {}
      for (const [name, listener] of own) {
        const { port, variables } = config.routes.find((r) => r.name === name)!
        await listener.app.listen({ port: port!, host: config.proxy.host, listenTextResolver: (address) => `route ${name} on ${address}` })
          .catch((err: NodeJS.ErrnoException) => { throw new ListenError(variables.port!, config.proxy.host, port!, err) })
        ports[name] = listener.app.server.address() as AddressInfo
      }
      await main.app.listen({ port: config.proxy.port, host: config.proxy.host, listenTextResolver: (address) => `proxy on ${address}` })
        .catch((err: NodeJS.ErrnoException) => { throw new ListenError('PROXY_PORT', config.proxy.host, config.proxy.port, err) })
      const addresses = { proxy: main.app.server.address() as AddressInfo, admin: admin.server.address() as AddressInfo, routes: ports }
      if (forward === undefined) return addresses
      const port = config.forward!.port
      await forward.proxy.listener.app.listen({ port, host: config.proxy.host, listenTextResolver: (address) => `forward proxy on ${address}` })
        .catch((err: NodeJS.ErrnoException) => { throw new ListenError('FORWARD_PROXY_PORT', config.proxy.host, port, err) })
      return { ...addresses, forward: forward.proxy.listener.app.server.address() as AddressInfo }
    },
    apply (next) {
      const done = applying.then(async () => {
        if (closing) throw new Error('the sidecar is shutting down')
        return await apply(next)
      })
      applying = done.catch(() => {})
      return done
    },
    close (graceMs = config.shutdownGraceMs) {
      closed ??= shutdown(graceMs)
      return closed
    }
  }
}

/**
 * Bounds each listener's client connections (PROXY_MAX_CONNECTIONS,
 * ADMIN_MAX_CONNECTIONS) within the file descriptor limit, which the upstream
 * pools and the auth server need too; says so when the limit lowered them.
 */
function boundListeners (config: Pick<Config, 'bounds' | 'routes' | 'upstream'>, deps: AppDeps, logger: pino.Logger, metrics: Metrics, proxies: Array<[string, Listener]>, admin: FastifyInstance): void {
  const limit = deps.descriptorLimit === undefined ? descriptorLimit() : deps.descriptorLimit ?? undefined
  const asked = { proxy: config.bounds.proxyConnections, admin: config.bounds.adminConnections }
  const fitted = fitConnections({ ...asked, proxyListeners: proxies.length, upstreamConnections: config.routes.length * config.upstream.connections, limit })
  if (fitted.proxy < asked.proxy || fitted.admin < asked.admin) {
    const lowered = [...(fitted.proxy < asked.proxy ? [`PROXY_MAX_CONNECTIONS=${asked.proxy} to ${fitted.proxy} per proxy listener`] : []), ...(fitted.admin < asked.admin ? [`ADMIN_MAX_CONNECTIONS=${asked.admin} to ${fitted.admin}`] : [])]
    logger.warn({ event: 'config', descriptorLimit: limit, proxyMaxConnections: fitted.proxy, adminMaxConnections: fitted.admin },
      `the file descriptor limit (ulimit -n) ${String(limit)} lowers ${lowered.join(' and ')}, keeping descriptors for the upstream connections and the auth server; a limit of ${fitted.needed} holds the bounds asked for`)
  }
  for (const [variable, listener] of proxies) boundConnections(listener.app.server, fitted.proxy, metrics.countShed(variable))
  boundConnections(admin.server, fitted.admin, metrics.countShed('ADMIN_PORT'))
}

/** A scrubber that knows the egress proxy's credentials from the start: they are in its URL, not in a secret file. */
function egressSecrets (egress: Config['egress']): SecretScrubber {
  const secrets = new SecretScrubber()
  for (const proxyUrl of [egress.httpProxy, egress.httpsProxy]) {
    if (proxyUrl === undefined) continue
    const { username, password } = new URL(proxyUrl)
    secrets.add(decodeURIComponent(password))
    secrets.add(password)
    if (password !== '') secrets.add(decodeURIComponent(username))
  }
  return secrets
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

/** Why the sidecar is not ready: the routes that cannot serve, each with its reason, or the forward proxy's CA. */
function notReady (routes: readonly Route[], forwardCa: string | undefined): { reason: string, routes?: Record<string, string> } | undefined {
  const reasons = new Map<string, string>()
  for (const route of routes) {
    const reason = route.notReady()
    if (reason !== undefined) reasons.set(route.name, reason)
  }
  if (reasons.size === 0) return forwardCa === undefined ? undefined : { reason: `forward proxy: ${forwardCa}` }
  if (routes.length === 1) return { reason: reasons.get('default')! }
  return { reason: [...reasons].map(([name, reason]) => `route ${name}: ${reason}`).join('; '), routes: Object.fromEntries(reasons) }
}

/** One stop for several watches. */
function every (stops: Array<() => void>): () => void {
  return () => { for (const stop of stops) stop() }
}
