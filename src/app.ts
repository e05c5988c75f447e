import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Agent, Dispatcher } from 'undici'
import type pino from 'pino'
import { createAdminServer } from './admin/server.js'
import { createMetrics, type Metrics } from './admin/metrics.js'
import { CredentialStore } from './config/credentials.js'
import type { Config } from './config/load.js'
import { requestIdOf, startedAt } from './proxy/forward.js'
import { createProxyServer } from './proxy/server.js'
import { BasicAuthorization } from './token/basic.js'
import type { Clock } from './token/clock.js'
import type { PostForm } from './token/grant.js'
import { createPostForm } from './token/http.js'
import { TokenManager, type AuthorizationSource } from './token/manager.js'
import { EnvHttpProxyAgent, UndiciAgent, UndiciPool } from './undici.js'

export interface AppDeps {
  logger: pino.Logger
  clock?: Clock
  /** replaces the HTTP client of the token endpoint (tests) */
  post?: PostForm
}

export interface App {
  proxy: Server
  admin: Server
  tokens: AuthorizationSource
  metrics: Metrics
  /** Starts the token lifecycle and both listeners; resolves with their addresses. */
  listen(): Promise<{ proxy: AddressInfo, admin: AddressInfo }>
  /** Stops taking requests, lets in-flight ones finish (at most `graceMs`), releases everything. Idempotent. */
  close(graceMs?: number): Promise<void>
}

/** Builds the proxy and admin servers without listening (SPEC §3, §5). */
export function buildApp (config: Config, deps: AppDeps): App {
  const { logger } = deps
  const credentials = new CredentialStore(config.credentials)
  const upstreamDispatcher = createDispatcher(config, config.upstream.origin, {
    connections: config.upstream.connections,
    keepAliveTimeout: config.upstream.keepAliveMs,
    keepAliveMaxTimeout: config.upstream.keepAliveMs,
    headersTimeout: config.upstream.timeoutMs,
    bodyTimeout: config.upstream.idleTimeoutMs
  })
  let tokenDispatcher: Dispatcher | undefined

  let tokens: AuthorizationSource
  let metrics: Metrics
  if (config.auth.mode === 'oauth2') {
    let post = deps.post
    if (post === undefined) {
      tokenDispatcher = createDispatcher(config, undefined, { connections: 2, keepAliveTimeout: 4_000 })
      post = createPostForm(tokenDispatcher)
    }
    tokens = new TokenManager({
      tokenUrl: config.auth.tokenUrl,
      client: { clientId: config.auth.clientId, ...(config.auth.scope !== undefined && { scope: config.auth.scope }) },
      credentials,
      post,
      log: logger.child({ component: 'token' }),
      ...config.token,
      ...(deps.clock !== undefined && { clock: deps.clock }),
      onGrant: (grant, outcome) => metrics.grant(grant, outcome)
    })
  } else {
    tokens = new BasicAuthorization(credentials)
  }
  metrics = createMetrics(() => tokens.expiresInSeconds(), () => tokens.ready())

  const proxyLog = logger.child({ component: 'proxy' })
  // The access log has fixed, secret-free fields: a child without redaction
  // keeps its cost off every request.
  const accessLog = proxyLog.child({}, { redact: [] })
  const { server: proxy, closeWebSockets } = createProxyServer({
    origin: config.upstream.origin,
    basePath: config.upstream.basePath,
    dispatcher: upstreamDispatcher,
    tokens,
    log: proxyLog,
    onResponse (req: IncomingMessage, res: ServerResponse, status: number) {
      const ms = performance.now() - startedAt(req)
      const url = req.url ?? ''
      const q = url.indexOf('?')
      accessLog.info({
        requestId: requestIdOf(req),
        method: req.method,
        path: q === -1 ? url : url.slice(0, q),
        status: res.writableFinished ? status : 499,
        durationMs: Math.round(ms * 10) / 10
      }, 'request')
      metrics.request(status, ms / 1000)
    }
  })

  let closing = false
  let closed: Promise<void> | undefined
  const admin = createAdminServer({
    registry: metrics.registry,
    notReadyReason: () => {
      if (closing) return 'shutting down'
      return tokens.ready() ? undefined : 'no valid access token'
    }
  })

  async function shutdown (graceMs: number): Promise<void> {
    closing = true
    const drained = new Promise<void>((resolve) => proxy.close(() => resolve()))
    closeWebSockets()
    // Idle kept-alive connections close now; busy ones when their answer is
    // done (Node marks them `Connection: close` once the server is closing).
    proxy.closeIdleConnections()
    const idle = setInterval(() => proxy.closeIdleConnections(), 100)
    const force = setTimeout(() => {
      logger.warn({ graceMs }, 'shutdown grace period over: closing the remaining connections')
      proxy.closeAllConnections()
    }, graceMs)
    try {
      await drained
    } finally {
      clearInterval(idle)
      clearTimeout(force)
      tokens.stop()
      credentials.close()
      admin.closeAllConnections()
      await new Promise<void>((resolve) => admin.close(() => resolve()))
      await Promise.all([upstreamDispatcher.close(), tokenDispatcher?.close()])
    }
  }

  return {
    proxy,
    admin,
    tokens,
    metrics,
    async listen () {
      tokens.start()
      await listenOn(admin, config.admin.port, config.admin.host)
      await listenOn(proxy, config.proxy.port, config.proxy.host)
      return { proxy: proxy.address() as AddressInfo, admin: admin.address() as AddressInfo }
    },
    close (graceMs = config.shutdownGraceMs) {
      closed ??= shutdown(graceMs)
      return closed
    }
  }
}

function listenOn (server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => { server.off('error', reject); resolve() })
  })
}

/**
 * An undici dispatcher that verifies TLS and honours the egress proxy
 * settings; for a single origin without a proxy, a Pool (no per-request
 * origin lookup).
 */
function createDispatcher (config: Config, origin: string | undefined, options: Agent.Options): Dispatcher {
  const { httpProxy, httpsProxy, noProxy } = config.egress
  if (httpProxy === undefined && httpsProxy === undefined) {
    return origin === undefined ? new UndiciAgent(options) : new UndiciPool(origin, options)
  }
  return new EnvHttpProxyAgent({ ...options, httpProxy: httpProxy ?? '', httpsProxy: httpsProxy ?? '', noProxy: noProxy ?? '' })
}
