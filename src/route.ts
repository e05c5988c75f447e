import type { EventEmitter } from 'node:events'
import type { FastifyInstance } from 'fastify'
import type pino from 'pino'
import { Pool, type Dispatcher } from 'undici'
import type { Config, RouteConfig } from './config/load.js'
import { originConnector } from './connector.js'
import type { ProxyEvents, UpstreamConnection } from './proxy/context.js'
import { InProgress, RouteSessions, type TableEntry } from './proxy/route-table.js'
import type { Listener } from './proxy/server.js'
import type { Tracing } from './tracing/tracing.js'
import { UpstreamSlots } from './proxy/upstream-slots.js'
import { TlsDispatcher } from './tls/dispatchers.js'
import type { ConnectTls, TlsFiles, TlsFileSets } from './tls/files.js'
import type { CredentialRegistry, CredentialSettings, HeldCredential } from './token/registry.js'

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

/**
 * What every route shares of the configuration: its credential's settings,
 * UPSTREAM_*, the egress proxy and WEBSOCKET_MAX_MESSAGE_BYTES.
 */
export type RouteSettings = CredentialSettings & Pick<Config, 'upstream'> & { proxy: Pick<Config['proxy'], 'websocketMaxMessageBytes'> }

/** What the routes share: the settings, the credentials and TLS files, the proxy's events and log. */
export interface RouteDeps<C extends RouteSettings = RouteSettings> {
  config: C
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
  readonly upstream: TlsDispatcher<UpstreamConnection>
  /** the requests waiting for a place among its upstream connections */
  readonly slots: UpstreamSlots
  /** the requests it took, on every listener, not answered yet */
  readonly requests = new InProgress()
  /** its WebSocket sessions, those of the versions of it before included: they end when the route is removed */
  readonly sessions: RouteSessions
  /** its upstream client certificate, when it presents one */
  readonly certificate: CertificateInUse | undefined
  #listener: FastifyInstance | undefined
  /** lets go of its TLS files, so that a route gone leaves none watched */
  #releaseFiles = (): void => {}

  private constructor (config: RouteConfig, credential: HeldCredential, upstream: TlsDispatcher<UpstreamConnection>, slots: UpstreamSlots, certificate: CertificateInUse | undefined, sessions: RouteSessions) {
    this.config = config
    this.sessions = sessions
    this.credential = credential
    this.upstream = upstream
    this.slots = slots
    this.certificate = certificate
    // a pool kept for a token bound to a replaced certificate goes once the token is replaced
    credential.events.on('token', this.#tokenReplaced)
  }

  readonly #tokenReplaced = (): void => { this.upstream.retire() }

  /** `sessions`: those of the version it replaces, which go on with it */
  static async build (config: RouteConfig, deps: RouteDeps, sessions = new RouteSessions()): Promise<Route> {
    const credential = await deps.credentials.of(config.credential, deps.config)
    const files = config.tls === undefined ? undefined : await deps.tls.of(config.tls, config.name === 'default' ? 'upstream' : `upstream (route ${config.name})`)
    const upstream = new TlsDispatcher((connect, onTlsError) => {
      const made = upstreamConnections(deps.config, config.origin, connect, onTlsError)
      if (deps.log.isLevelEnabled('debug')) logConnections(made.dispatcher, deps.log)
      return made
    }, files, () => credential.current()?.certificate)
    const certificate = files?.certificate === undefined ? undefined : { which: 'upstream' as const, route: config.name, files }
    const route = new Route(config, credential, upstream, new UpstreamSlots(deps.config.upstream.connections), certificate, sessions)
    if (files !== undefined) route.#releaseFiles = once(() => { deps.tls.release(files) })
    return route
  }

  get name (): string {
    return this.config.name
  }

  /** The listener serving the route (its own port's, or PROXY_PORT's), once placed on it. */
  get listener (): FastifyInstance {
    return this.#listener!
  }

  /**
   * The route as `listener` serves it: under its prefix, or on the forward
   * proxy's listener for the requests for its BASE_URL (its origin, under
   * its base path, forwarded as they are).
   */
  entry (listener: Listener, deps: RouteDeps, mode: 'reverse' | 'forward' = 'reverse'): TableEntry {
    if (mode === 'reverse') this.#listener = listener.app
    const { config: global } = deps
    const route = this.config
    const prefix = mode === 'forward' ? route.basePath : route.path
    return {
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
        admission: listener.admission,
        log: deps.log,
        events: deps.events
      },
      requests: this.requests,
      sessions: this.sessions
    }
  }

  /** Why the route cannot serve now (its client certificate, or its credential); undefined when it can. */
  notReady (): string | undefined {
    return this.upstream.unusable() ?? this.credential.notReadyReason()
  }

  /**
   * Closes its upstream connections once the requests it took are done: a
   * new configuration left it out. `removed` (no route of its name is left),
   * its WebSocket sessions are ended at once with 1001, those its handshakes
   * under way open too, so that their clients reconnect to what serves now;
   * a changed route's go on over the connections they opened.
   */
  async retire (removed: boolean): Promise<void> {
    this.credential.events.off('token', this.#tokenReplaced)
    if (removed) this.sessions.end('route removed')
    await this.requests.idle()
    await this.upstream.close()
    this.#releaseFiles()
  }

  /** Closes its upstream connections at once, cutting what is left on them (the listeners have drained). */
  async close (): Promise<void> {
    this.credential.events.off('token', this.#tokenReplaced)
    await this.upstream.destroy()
    this.#releaseFiles()
  }
}

/** A route's upstream pool, and the connector it shares with the route's WebSocket handshakes; verifies TLS. */
function upstreamConnections (config: Pick<Config, 'upstream' | 'egress'>, origin: string, tls: ConnectTls, onTlsError: (code: string) => void): UpstreamConnection {
  const { upstream } = config
  const connect = originConnector(config.egress, origin, tls, onTlsError)
  const dispatcher = new Pool(origin, {
    connections: upstream.connections,
    // UPSTREAM_KEEPALIVE_MS when the upstream does not say how long it keeps
    // an idle connection; when it does (`Keep-Alive: timeout=N`), undici
    // keeps it N less 2 s, up to KEEPALIVE_ANNOUNCED_MAX_MS.
    keepAliveTimeout: upstream.keepAliveMs,
    keepAliveMaxTimeout: Math.max(upstream.keepAliveMs, KEEPALIVE_ANNOUNCED_MAX_MS),
    headersTimeout: upstream.timeoutMs,
    bodyTimeout: upstream.idleTimeoutMs,
    connect
  })
  return { dispatcher, connect }
}

/** LOG_LEVEL=debug: the upstream pool's connections as they open, close and fail. */
function logConnections (dispatcher: Dispatcher, log: pino.Logger): void {
  const origin = (o: unknown): string => String((o as URL | string | undefined)?.toString() ?? '')
  dispatcher.on('connect', (o) => log.debug({ event: 'upstream_connection', origin: origin(o) }, 'upstream connection opened'))
  dispatcher.on('disconnect', (o, _targets, err) => log.debug({ event: 'upstream_connection', origin: origin(o), reason: (err as { code?: string }).code ?? err.name }, 'upstream connection closed'))
  dispatcher.on('connectionError', (o, _targets, err) => log.debug({ event: 'upstream_connection', origin: origin(o), reason: (err as { code?: string }).code ?? err.name }, 'upstream connection failed'))
}

function once (f: () => void): () => void {
  let done = false
  return () => {
    if (done) return
    done = true
    f()
  }
}
