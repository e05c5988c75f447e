import type { AddressInfo } from 'node:net'
import type { FastifyInstance } from 'fastify'
import type { Dispatcher } from 'undici'
import type pino from 'pino'
import { buildAdmin } from './admin/server.js'
import { createMetrics, type Metrics } from './admin/metrics.js'
import { CredentialStore } from './config/credentials.js'
import type { Config } from './config/load.js'
import { createDispatcher } from './dispatcher.js'
import { buildProxy } from './proxy/server.js'
import { UpstreamDispatcher } from './proxy/upstream.js'
import { SecretScrubber } from './secrets.js'
import { AuthServer } from './token/auth-server.js'
import { BasicAuthorization } from './token/basic.js'
import { ClientAuthenticator } from './token/client-auth.js'
import { systemClock, type Clock } from './token/clock.js'
import { DpopKey } from './token/dpop.js'
import type { GetJson, PostForm } from './token/grant.js'
import { createGetJson, createPostForm } from './token/http.js'
import { TokenManager } from './token/manager.js'
import type { AuthorizationSource } from './token/source.js'

export interface AppDeps {
  logger: pino.Logger
  clock?: Clock
  /** replaces the HTTP client of the token endpoint (tests) */
  post?: PostForm
  /** replaces the HTTP client of discovery (tests) */
  get?: GetJson
  /** replaces the 60 s limit for a client's request headers (tests) */
  headersTimeoutMs?: number
}

export interface App {
  proxy: FastifyInstance
  admin: FastifyInstance
  tokens: AuthorizationSource
  metrics: Metrics
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
  const credentials = new CredentialStore(config.credentials)
  const upstreamPool = createDispatcher(config.egress, config.upstream.origin, {
    connections: config.upstream.connections,
    // UPSTREAM_KEEPALIVE_MS when the upstream does not say how long it keeps
    // an idle connection; when it does (`Keep-Alive: timeout=N`), undici
    // keeps it N less 2 s, up to KEEPALIVE_ANNOUNCED_MAX_MS.
    keepAliveTimeout: config.upstream.keepAliveMs,
    keepAliveMaxTimeout: Math.max(config.upstream.keepAliveMs, KEEPALIVE_ANNOUNCED_MAX_MS),
    headersTimeout: config.upstream.timeoutMs,
    bodyTimeout: config.upstream.idleTimeoutMs
  })
  let tokenDispatcher: Dispatcher | undefined

  const secrets = new SecretScrubber()
  for (const proxyUrl of [config.egress.httpProxy, config.egress.httpsProxy]) {
    if (proxyUrl === undefined) continue
    const { username, password } = new URL(proxyUrl)
    secrets.add(decodeURIComponent(password))
    secrets.add(password)
    if (password !== '') secrets.add(decodeURIComponent(username))
  }

  let tokens: AuthorizationSource
  let metrics: Metrics
  const dpopMode = config.auth.mode === 'oauth2' && config.auth.dpop !== undefined
  if (config.auth.mode === 'oauth2') {
    let { post, get } = deps
    if (post === undefined || get === undefined) {
      tokenDispatcher = createDispatcher(config.egress, undefined, { connections: 2, keepAliveTimeout: 4_000 })
      post ??= createPostForm(tokenDispatcher)
      get ??= createGetJson(tokenDispatcher)
    }
    const { tokenUrl, issuerUrl, alternateTokenUrl, grantType, clientAuth, clientId, clientKeyAlg, clientKeyId, scope, params, dpop } = config.auth
    const clock = deps.clock ?? systemClock
    const server = new AuthServer({
      ...(tokenUrl !== undefined && { tokenUrl }),
      ...(issuerUrl !== undefined && { issuerUrl }),
      ...(alternateTokenUrl !== undefined && { alternateTokenUrl }),
      grantType,
      client: new ClientAuthenticator({
        clientId,
        clientAuth,
        ...(clientKeyAlg !== undefined && { keyAlg: clientKeyAlg }),
        ...(clientKeyId !== undefined && { keyId: clientKeyId })
      }),
      extras: { params, ...(scope !== undefined && { scope }) },
      credentials,
      post,
      get,
      timeoutMs: config.token.timeoutMs,
      ...(dpop !== undefined && { dpop: await DpopKey.generate(dpop) }),
      clock,
      log: logger.child({ component: 'token' }),
      secrets,
      onGrant: (grant, outcome) => metrics.grant(grant, outcome)
    })
    tokens = new TokenManager({
      server,
      credentials,
      log: logger.child({ component: 'token' }),
      waitMs: config.token.waitMs,
      retryMinMs: config.token.retryMinMs,
      retryMaxMs: config.token.retryMaxMs,
      rejectedRetryMs: config.token.rejectedRetryMs,
      clock,
      onLogout: (outcome) => metrics.logout(outcome),
      secrets
    })
  } else {
    tokens = new BasicAuthorization(credentials)
  }
  metrics = createMetrics(() => tokens.expiresInSeconds(), () => tokens.ready(), dpopMode)
  const origin = config.upstream.origin
  const upstreamDispatcher = new UpstreamDispatcher(upstreamPool, config.upstream.timeoutMs,
    dpopMode ? (authorization, method, path) => tokens.proof(authorization, method, origin + path) : undefined)

  const proxyLog = logger.child({ component: 'proxy' })
  // An access line has fixed fields, none secret; pino's redaction paths
  // cost a sixth of a proxied request's CPU when checked on every line.
  const accessLogger = proxyLog.child({}, { redact: [] })
  const { app: proxy, closeWebSockets } = await buildProxy({
    origin: config.upstream.origin,
    basePath: config.upstream.basePath,
    dispatcher: upstreamDispatcher,
    maxRequests: config.proxy.maxRequests,
    websocketMaxMessageBytes: config.proxy.websocketMaxMessageBytes,
    upstreamTimeoutMs: config.upstream.timeoutMs,
    egress: config.egress,
    ...(deps.headersTimeoutMs !== undefined && { headersTimeoutMs: deps.headersTimeoutMs }),
    tokens,
    log: proxyLog,
    onResponse: (line) => {
      if (config.accessLog) accessLogger.info(line, 'request')
      metrics.request(line.status, line.durationMs / 1000)
    },
    onUpstreamError: (reason) => metrics.upstreamError(reason),
    onDpopRefused: (reason) => metrics.dpopRefused(reason)
  })
  if (logger.isLevelEnabled('debug')) logConnections(upstreamPool, proxyLog)

  let closing = false
  let closed: Promise<void> | undefined
  const admin = buildAdmin({
    registry: metrics.registry,
    log: logger.child({ component: 'admin' }),
    notReadyReason: () => {
      if (closing) return 'shutting down'
      return tokens.notReadyReason()
    }
  })

  async function shutdown (graceMs: number): Promise<void> {
    closing = true
    const server = proxy.server
    closeWebSockets()
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
    tokens.stop()
    credentials.close()
    await upstreamDispatcher.destroy()
    // After the drain, one token request at most: the session is ended even
    // when the drain took the whole grace period.
    if (config.auth.mode === 'oauth2' && config.auth.logoutOnShutdown) await tokens.endSession(config.token.timeoutMs)
    await admin.close()
    await tokenDispatcher?.destroy()
  }

  return {
    proxy,
    admin,
    tokens,
    metrics,
    secrets,
    async listen () {
      tokens.start()
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

/** LOG_LEVEL=debug: the upstream pool's connections as they open, close and fail. */
function logConnections (dispatcher: Dispatcher, log: pino.Logger): void {
  const origin = (o: unknown): string => String((o as URL | string | undefined)?.toString() ?? '')
  dispatcher.on('connect', (o) => log.debug({ event: 'upstream_connection', origin: origin(o) }, 'upstream connection opened'))
  dispatcher.on('disconnect', (o, _targets, err) => log.debug({ event: 'upstream_connection', origin: origin(o), reason: (err as { code?: string }).code ?? err.name }, 'upstream connection closed'))
  dispatcher.on('connectionError', (o, _targets, err) => log.debug({ event: 'upstream_connection', origin: origin(o), reason: (err as { code?: string }).code ?? err.name }, 'upstream connection failed'))
}
