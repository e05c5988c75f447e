import { EventEmitter } from 'node:events'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance } from 'fastify'
import type { Dispatcher } from 'undici'
import type pino from 'pino'
import { buildAdmin } from './admin/server.js'
import { createMetrics, type Metrics } from './admin/metrics.js'
import { CredentialStore } from './config/credentials.js'
import type { Config } from './config/load.js'
import { createDispatcher, websocketEgress } from './dispatcher.js'
import type { ProxyEvents } from './proxy/context.js'
import { proxyRoute } from './proxy/route.js'
import { buildListener, FORWARDED_METHODS } from './proxy/server.js'
import { UpstreamSlots } from './proxy/upstream-slots.js'
import { SecretScrubber } from './secrets.js'
import { BasicCredential } from './token/basic.js'
import { ClientAuthenticator } from './token/client-auth.js'
import { systemClock, type Clock } from './token/clock.js'
import { DpopKey } from './token/dpop.js'
import { createAuthHttp, type AuthHttp } from './token/http.js'
import { TokenManager } from './token/manager.js'
import { OAuthClient } from './token/oauth-client.js'

export interface AppDeps {
  logger: pino.Logger
  clock?: Clock
  /** replaces the HTTP client of the auth server (tests) */
  http?: AuthHttp
  /** replaces the 60 s limit for a client's request headers (tests) */
  headersTimeoutMs?: number
}

export interface App {
  proxy: FastifyInstance
  admin: FastifyInstance
  /** the default route's credential */
  credential: TokenManager | BasicCredential
  metrics: Metrics
  /** what happens in the proxy: each answer, each failure of the upstream */
  events: EventEmitter<ProxyEvents>
  /** known secret values (credentials, tokens, a proxy's password), for texts shown to people */
  secrets: SecretScrubber
  /** Starts the token lifecycle and both listeners; resolves with their addresses. */
  listen(): Promise<{ proxy: AddressInfo, admin: AddressInfo }>
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

/** Builds the proxy and admin servers without listening. */
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

  const store = new CredentialStore(config.credentials, (message) => logger.warn({ event: 'credentials' }, message))
  let tokenDispatcher: Dispatcher | undefined
  const http = deps.http ?? createAuthHttp(tokenDispatcher = createDispatcher(config.egress, undefined, { connections: 2, keepAliveTimeout: 4_000 }))
  const credential = await buildCredential(config, store, http, secrets, deps.clock ?? systemClock, logger.child({ component: 'token' }))

  const events = new EventEmitter<ProxyEvents>()
  const metrics = createMetrics()
  metrics.watchCredential(credential, { dpop: config.auth.mode === 'oauth2' && config.auth.dpop !== undefined })
  metrics.watchProxy(events)
  const proxyLog = logger.child({ component: 'proxy' })
  // An access line has fixed fields, none secret; pino's redaction paths
  // cost a sixth of a proxied request's CPU when checked on every line.
  const accessLogger = proxyLog.child({}, { redact: [] })
  if (config.accessLog) events.on('response', (line) => accessLogger.info(line, 'request'))

  const { upstream } = config
  const upstreamPool = createDispatcher(config.egress, upstream.origin, {
    connections: upstream.connections,
    // UPSTREAM_KEEPALIVE_MS when the upstream does not say how long it keeps
    // an idle connection; when it does (`Keep-Alive: timeout=N`), undici
    // keeps it N less 2 s, up to KEEPALIVE_ANNOUNCED_MAX_MS.
    keepAliveTimeout: upstream.keepAliveMs,
    keepAliveMaxTimeout: Math.max(upstream.keepAliveMs, KEEPALIVE_ANNOUNCED_MAX_MS),
    headersTimeout: upstream.timeoutMs,
    bodyTimeout: upstream.idleTimeoutMs
  })
  if (logger.isLevelEnabled('debug')) logConnections(upstreamPool, proxyLog)

  const listener = buildListener({
    route: 'default',
    maxRequests: config.proxy.maxRequests,
    ...(deps.headersTimeoutMs !== undefined && { headersTimeoutMs: deps.headersTimeoutMs }),
    log: proxyLog,
    events
  })
  const proxy = listener.app
  await proxy.register(proxyRoute, {
    context: {
      route: {
        name: 'default',
        origin: upstream.origin,
        host: new URL(upstream.origin).host,
        basePath: upstream.basePath,
        prefix: '',
        timeoutMs: upstream.timeoutMs,
        websocketMaxMessageBytes: config.proxy.websocketMaxMessageBytes
      },
      credential,
      dispatcher: upstreamPool,
      slots: new UpstreamSlots(upstream.connections),
      admission: listener.admission,
      log: proxyLog,
      events
    },
    methods: FORWARDED_METHODS,
    websockets: listener.websockets,
    egress: websocketEgress(config.egress, upstream.origin)
  })

  // The token lifecycle follows the proxy's: it starts when the proxy is
  // ready, and stops once the proxy's requests have drained, the session
  // then ended.
  proxy.addHook('onReady', (done) => { credential.start(); done() })
  proxy.addHook('onClose', async () => {
    credential.stop()
    store.close()
    await upstreamPool.destroy()
    // After the drain, one token request at most: the session is ended even
    // when the drain took the whole grace period.
    if (config.auth.mode === 'oauth2' && config.auth.logoutOnShutdown) await credential.endSession(config.token.timeoutMs)
    await tokenDispatcher?.destroy()
  })

  let closing = false
  let closed: Promise<void> | undefined
  const admin = buildAdmin({
    registry: metrics.registry,
    log: logger.child({ component: 'admin' }),
    notReadyReason: () => closing ? 'shutting down' : credential.notReadyReason()
  })

  async function shutdown (graceMs: number): Promise<void> {
    closing = true
    const server = proxy.server
    listener.websockets.close()
    // Fastify's close stops accepting and closes idle kept-alive connections;
    // busy ones close once their answer is done (Node answers with
    // `Connection: close` once the server is closing). Connections that
    // turn idle later are closed as they do. What is still in progress when
    // the grace period ends is cut: the client's connection closed, which
    // aborts its upstream request.
    const idle = setInterval(() => server.closeIdleConnections(), 100)
    const cut = setTimeout(() => {
      logger.warn({ graceMs }, 'shutdown grace period over: cutting the requests still in progress')
      server.closeAllConnections()
    }, graceMs)
    try {
      await proxy.close()
    } finally {
      clearInterval(idle)
      clearTimeout(cut)
    }
    await admin.close()
  }

  return {
    proxy,
    admin,
    credential,
    metrics,
    events,
    secrets,
    async listen () {
      await admin.listen({ port: config.admin.port, host: config.admin.host, listenTextResolver: (address) => `admin endpoints on ${address}` })
        .catch((err: NodeJS.ErrnoException) => { throw new ListenError('ADMIN_PORT', config.admin.host, config.admin.port, err) })
      await proxy.listen({ port: config.proxy.port, host: config.proxy.host, listenTextResolver: (address) => `proxy on ${address}` })
        .catch((err: NodeJS.ErrnoException) => { throw new ListenError('PROXY_PORT', config.proxy.host, config.proxy.port, err) })
      return { proxy: proxy.server.address() as AddressInfo, admin: admin.server.address() as AddressInfo }
    },
    close (graceMs = config.shutdownGraceMs) {
      closed ??= shutdown(graceMs)
      return closed
    }
  }
}

/** The credential the configuration describes: a token kept fresh (oauth2), or fixed Basic credentials. */
async function buildCredential (config: Config, store: CredentialStore, http: AuthHttp, secrets: SecretScrubber, clock: Clock, log: pino.Logger): Promise<TokenManager | BasicCredential> {
  if (config.auth.mode === 'basic') return await BasicCredential.create(store)
  const { tokenUrl, issuerUrl, alternateTokenUrl, grantType, clientAuth, clientId, clientKeyAlg, clientKeyId, scope, params, dpop } = config.auth
  const server = new OAuthClient({
    ...(tokenUrl !== undefined && { tokenUrl }),
    ...(issuerUrl !== undefined && { issuerUrl }),
    ...(alternateTokenUrl !== undefined && { alternateTokenUrl }),
    grantType,
    clientId,
    client: new ClientAuthenticator({
      clientId,
      clientAuth,
      ...(clientKeyAlg !== undefined && { keyAlg: clientKeyAlg }),
      ...(clientKeyId !== undefined && { keyId: clientKeyId }),
      onSecret: (value) => secrets.addToken(value)
    }),
    extras: { params, ...(scope !== undefined && { scope }) },
    credentials: store,
    http,
    timeoutMs: config.token.timeoutMs,
    ...(dpop !== undefined && { dpop: await DpopKey.generate(dpop) }),
    clock,
    log,
    secrets
  })
  return new TokenManager({
    server,
    credentials: store,
    log,
    waitMs: config.token.waitMs,
    retryMinMs: config.token.retryMinMs,
    retryMaxMs: config.token.retryMaxMs,
    rejectedRetryMs: config.token.rejectedRetryMs,
    clock,
    secrets
  })
}

/** LOG_LEVEL=debug: the upstream pool's connections as they open, close and fail. */
function logConnections (dispatcher: Dispatcher, log: pino.Logger): void {
  const origin = (o: unknown): string => String((o as URL | string | undefined)?.toString() ?? '')
  dispatcher.on('connect', (o) => log.debug({ event: 'upstream_connection', origin: origin(o) }, 'upstream connection opened'))
  dispatcher.on('disconnect', (o, _targets, err) => log.debug({ event: 'upstream_connection', origin: origin(o), reason: (err as { code?: string }).code ?? err.name }, 'upstream connection closed'))
  dispatcher.on('connectionError', (o, _targets, err) => log.debug({ event: 'upstream_connection', origin: origin(o), reason: (err as { code?: string }).code ?? err.name }, 'upstream connection failed'))
}
