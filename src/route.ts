import type { EventEmitter } from 'node:events'
import type { FastifyInstance } from 'fastify'
import type { Dispatcher } from 'undici'
import type pino from 'pino'
import type { Config, RouteConfig } from './config/load.js'
import { createDispatcher, websocketEgress } from './dispatcher.js'
import type { ProxyEvents } from './proxy/context.js'
import { proxyRoute } from './proxy/route.js'
import { NO_TRACING, type Tracing } from './tracing/tracing.js'
import { DESTINATION, FORWARDED_METHODS } from './proxy/server.js'
import { UpstreamSlots } from './proxy/upstream-slots.js'
import { TlsDispatcher } from './tls/dispatchers.js'
import type { ConnectTls, TlsFiles, TlsFileSets } from './tls/files.js'
import type { CredentialRegistry, HeldCredential } from './token/registry.js'

/**
 * The longest an upstream's announced keep-alive is honoured: under the idle
 * timeouts of the load balancers and NAT gateways that drop connections
 * silently (AWS's 350 s, Azure's 4 minutes), where a request on a connection
 * they dropped would wait for UPSTREAM_TIMEOUT_MS.
 */
export const KEEPALIVE_ANNOUNCED_MAX_MS = 60_000

/** A client certificate in use: which way it goes (upstream, auth), for which route, and its files. */
export interface CertificateInUse {
  which: 'upstream' | 'auth'
  route: string
  files: TlsFiles
}

/** What the routes share: the settings, the credentials and TLS files, the proxy's events and log. */
export interface RouteDeps {
  config: Config
  credentials: CredentialRegistry
  tls: TlsFileSets
  events: EventEmitter<ProxyEvents>
  log: pino.Logger
  /** each request's SERVER span and each try's CLIENT span; none by default */
  tracing?: Tracing
}

/**
 * One route, the unit the sidecar is composed of: built once from its
 * configuration, it owns its credential (shared with the routes whose
 * settings are the same), its upstream connections (a pool per client
 * certificate, TLS verified) and the queue in front of them, its place on
 * a listener, its readiness and its close. A new way in (a WebSocket
 * upgrade, a forward-proxy request) reaches the same route through the
 * listener's router.
 */
export class Route {
  readonly config: RouteConfig
  readonly credential: HeldCredential
  readonly upstream: TlsDispatcher
  /** the requests waiting for a place among its upstream connections */
  readonly slots: UpstreamSlots
  /** its upstream client certificate, when it presents one */
  readonly certificate: CertificateInUse | undefined
  #listener: FastifyInstance | undefined

  private constructor (config: RouteConfig, credential: HeldCredential, upstream: TlsDispatcher, slots: UpstreamSlots, certificate: CertificateInUse | undefined) {
    this.config = config
    this.credential = credential
    this.upstream = upstream
    this.slots = slots
    this.certificate = certificate
  }

  static async build (config: RouteConfig, deps: RouteDeps): Promise<Route> {
    const credential = await deps.credentials.of(config.credential)
    const files = config.tls === undefined ? undefined : await deps.tls.of(config.tls, config.name === 'default' ? 'upstream' : `upstream (route ${config.name})`)
    const upstream = new TlsDispatcher((connect, onTlsError) => {
      const made = upstreamPool(deps.config, config.origin, connect, onTlsError)
      if (deps.log.isLevelEnabled('debug')) logConnections(made, deps.log)
      return made
    }, files, () => credential.current()?.certificate)
    // a pool kept for a token bound to a replaced certificate goes once the token is replaced
    credential.events.on('token', () => upstream.retire())
    const certificate = files?.certificate === undefined ? undefined : { which: 'upstream' as const, route: config.name, files }
    return new Route(config, credential, upstream, new UpstreamSlots(deps.config.upstream.connections), certificate)
  }

  get name (): string {
    return this.config.name
  }

  /** The listener serving the route (its own port's, or PROXY_PORT's), once registered. */
  get listener (): FastifyInstance {
    return this.#listener!
  }

  /**
   * Serves the route on `listener`: under its prefix, or on the forward
   * proxy's listener for the requests for its BASE_URL (its origin, under
   * its base path, forwarded as they are).
   */
  async register (listener: FastifyInstance, deps: RouteDeps, mode: 'reverse' | 'forward' = 'reverse'): Promise<void> {
    if (mode === 'reverse') this.#listener = listener
    const { config: global } = deps
    const route = this.config
    const prefix = mode === 'forward' ? route.basePath : route.path
    await listener.register(proxyRoute, {
      prefix,
      context: {
        route: {
          name: route.name,
          origin: route.origin,
          host: new URL(route.origin).host,
          basePath: route.basePath,
          prefix,
          timeoutMs: global.upstream.timeoutMs,
          websocketMaxMessageBytes: global.proxy.websocketMaxMessageBytes
        },
        credential: this.credential,
        upstream: this.upstream,
        slots: this.slots,
        log: deps.log,
        events: deps.events
      },
      methods: FORWARDED_METHODS,
      tracing: deps.tracing ?? NO_TRACING,
      egress: websocketEgress(global.egress, route.origin),
      ...(mode === 'forward' && { constraints: { [DESTINATION]: route.origin } })
    })
  }

  /** Why the route cannot serve now (its client certificate, or its credential); undefined when it can. */
  notReady (): string | undefined {
    return this.upstream.unusable() ?? this.credential.notReadyReason()
  }

  /** Closes its upstream connections at once, cutting what is left on them (the listeners have drained). */
  async close (): Promise<void> {
    await this.upstream.destroy()
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

/** LOG_LEVEL=debug: the upstream pool's connections as they open, close and fail. */
function logConnections (dispatcher: Dispatcher, log: pino.Logger): void {
  const origin = (o: unknown): string => String((o as URL | string | undefined)?.toString() ?? '')
  dispatcher.on('connect', (o) => log.debug({ event: 'upstream_connection', origin: origin(o) }, 'upstream connection opened'))
  dispatcher.on('disconnect', (o, _targets, err) => log.debug({ event: 'upstream_connection', origin: origin(o), reason: (err as { code?: string }).code ?? err.name }, 'upstream connection closed'))
  dispatcher.on('connectionError', (o, _targets, err) => log.debug({ event: 'upstream_connection', origin: origin(o), reason: (err as { code?: string }).code ?? err.name }, 'upstream connection failed'))
}
