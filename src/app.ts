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
import { BasicAuthorization } from './token/basic.js'
import type { Clock } from './token/clock.js'
import type { PostForm } from './token/grant.js'
import { createPostForm } from './token/http.js'
import { TokenManager, type AuthorizationSource } from './token/manager.js'

export interface AppDeps {
  logger: pino.Logger
  clock?: Clock
  /** replaces the HTTP client of the token endpoint (tests) */
  post?: PostForm
}

export interface App {
  proxy: FastifyInstance
  admin: FastifyInstance
  tokens: AuthorizationSource
  metrics: Metrics
  /** Starts the token lifecycle and both listeners; resolves with their addresses. */
  listen(): Promise<{ proxy: AddressInfo, admin: AddressInfo }>
  /** Stops taking requests, lets in-flight ones finish (at most `graceMs`), releases everything. Idempotent. */
  close(graceMs?: number): Promise<void>
}

/** Builds the proxy and admin servers without listening (SPEC §3, §5). */
export async function buildApp (config: Config, deps: AppDeps): Promise<App> {
  const { logger } = deps
  const credentials = new CredentialStore(config.credentials)
  const upstreamDispatcher = createDispatcher(config.egress, config.upstream.origin, {
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
      tokenDispatcher = createDispatcher(config.egress, undefined, { connections: 2, keepAliveTimeout: 4_000 })
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
  const { app: proxy, closeWebSockets } = await buildProxy({
    origin: config.upstream.origin,
    basePath: config.upstream.basePath,
    dispatcher: upstreamDispatcher,
    tokens,
    log: proxyLog,
    onResponse (line) {
      accessLog.info(line, 'request')
      metrics.request(line.status, line.durationMs / 1000)
    }
  })

  let closing = false
  let closed: Promise<void> | undefined
  const admin = buildAdmin({
    registry: metrics.registry,
    log: logger.child({ component: 'admin' }),
    notReadyReason: () => {
      if (closing) return 'shutting down'
      return tokens.ready() ? undefined : 'no valid access token'
    }
  })

  async function shutdown (graceMs: number): Promise<void> {
    closing = true
    const server = proxy.server
    closeWebSockets()
    // Fastify's close stops accepting and closes idle kept-alive connections;
    // busy ones close once their answer is done (Node answers with
    // `Connection: close` once the server is closing). Connections that
    // turn idle later are closed as they do.
    const idle = setInterval(() => server.closeIdleConnections(), 100)
    const force = setTimeout(() => {
      logger.warn({ graceMs }, 'shutdown grace period over: closing the remaining connections')
      server.closeAllConnections()
    }, graceMs)
    try {
      await proxy.close()
    } finally {
      clearInterval(idle)
      clearTimeout(force)
      tokens.stop()
      credentials.close()
      await admin.close()
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
      await admin.listen({ port: config.admin.port, host: config.admin.host, listenTextResolver: (address) => `admin endpoints on ${address}` })
      await proxy.listen({ port: config.proxy.port, host: config.proxy.host, listenTextResolver: (address) => `proxy on ${address}` })
      return { proxy: proxy.server.address() as AddressInfo, admin: admin.server.address() as AddressInfo }
    },
    close (graceMs = config.shutdownGraceMs) {
      closed ??= shutdown(graceMs)
      return closed
    }
  }
}
