import { randomUUID } from 'node:crypto'
import type { IncomingMessage, Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify'
import { Agent, EnvHttpProxyAgent, type Dispatcher } from 'undici'
import type pino from 'pino'
import { createAdminServer } from './admin/server.js'
import { createMetrics, type Metrics } from './admin/metrics.js'
import { CredentialStore } from './config/credentials.js'
import type { Config } from './config/load.js'
import { proxyPlugin } from './proxy/plugin.js'
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
  admin: Server
  tokens: AuthorizationSource
  metrics: Metrics
  /** Starts the token lifecycle and both listeners; resolves with their addresses. */
  listen(): Promise<{ proxy: AddressInfo, admin: AddressInfo }>
  /** Stops taking requests, lets in-flight ones finish (at most `graceMs`), releases everything. */
  close(graceMs?: number): Promise<void>
}

/** Request ids from the client are kept when they look like ids. */
const REQUEST_ID = /^[\w\-.:@/+=]{1,128}$/

/** Builds the proxy and admin servers without listening (SPEC §3, §5). */
export async function buildApp (config: Config, deps: AppDeps): Promise<App> {
  const { logger } = deps
  const credentials = new CredentialStore(config.credentials)
  const upstreamDispatcher = createDispatcher(config, {
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
      tokenDispatcher = createDispatcher(config, { connections: 2, keepAliveTimeout: 4_000 })
      post = createPostForm(tokenDispatcher)
    }
    const manager: TokenManager = new TokenManager({
      tokenUrl: config.auth.tokenUrl,
      client: { clientId: config.auth.clientId, ...(config.auth.scope !== undefined && { scope: config.auth.scope }) },
      credentials,
      post,
      log: logger.child({ component: 'token' }),
      ...config.token,
      ...(deps.clock !== undefined && { clock: deps.clock }),
      onGrant: (grant, outcome) => metrics.grant(grant, outcome)
    })
    tokens = manager
  } else {
    tokens = new BasicAuthorization(credentials)
  }
  metrics = createMetrics(() => tokens.expiresInSeconds(), () => tokens.ready())

  const proxy = Fastify({
    loggerInstance: logger.child({ component: 'proxy' }) as FastifyBaseLogger,
    // One access-log line per request is written by the proxy plugin instead.
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'requestId' }),
    requestIdHeader: false,
    genReqId: (req: IncomingMessage) => {
      const id = req.headers['x-request-id']
      return typeof id === 'string' && REQUEST_ID.test(id) ? id : randomUUID()
    },
    // Requests on kept-alive connections during shutdown are still served.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    routerOptions: { maxParamLength: 65_535 }
  })
  await proxy.register(proxyPlugin, {
    origin: config.upstream.origin,
    basePath: config.upstream.basePath,
    dispatcher: upstreamDispatcher,
    tokens,
    onResponse: (status, seconds) => metrics.request(status, seconds)
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

  return {
    proxy,
    admin,
    tokens,
    metrics,
    async listen () {
      tokens.start()
      await new Promise<void>((resolve, reject) => {
        admin.once('error', reject)
        admin.listen(config.admin.port, config.admin.host, () => { admin.off('error', reject); resolve() })
      })
      await proxy.listen({ port: config.proxy.port, host: config.proxy.host })
      return { proxy: proxy.server.address() as AddressInfo, admin: admin.address() as AddressInfo }
    },
    close (graceMs = config.shutdownGraceMs) {
      closed ??= shutdown(graceMs)
      return closed
    }
  }

  async function shutdown (graceMs: number): Promise<void> {
    closing = true
    const force = setTimeout(() => {
      logger.warn({ graceMs }, 'shutdown grace period over: closing the remaining connections')
      proxy.server.closeAllConnections()
    }, graceMs)
    try {
      await proxy.close()
    } finally {
      clearTimeout(force)
      tokens.stop()
      credentials.close()
      admin.closeAllConnections()
      await new Promise<void>((resolve) => admin.close(() => resolve()))
      await Promise.all([upstreamDispatcher.close(), tokenDispatcher?.close()])
    }
  }
}

/** An undici dispatcher that verifies TLS and honours the egress proxy settings. */
function createDispatcher (config: Config, options: Agent.Options): Dispatcher {
  const { httpProxy, httpsProxy, noProxy } = config.egress
  if (httpProxy === undefined && httpsProxy === undefined) return new Agent(options)
  return new EnvHttpProxyAgent({ ...options, httpProxy: httpProxy ?? '', httpsProxy: httpsProxy ?? '', noProxy: noProxy ?? '' })
}
