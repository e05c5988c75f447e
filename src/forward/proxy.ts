import { randomUUID } from 'node:crypto'
import type { IncomingMessage } from 'node:http'
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Agent } from 'undici'
import type { ForwardSettings, UpstreamSettings } from '../config/types.js'
import { ERRORS, type ErrorCode } from '../errors.js'
import type { Route, RouteDeps } from '../route.js'
import type { AccessLine } from '../proxy/access-log.js'
import { answerOnSocket } from '../proxy/client-errors.js'
import { sendError } from '../proxy/replies.js'
import { UNROUTED } from '../proxy/request-budget.js'
import { buildListener, HEADERS_TIMEOUT_MS, type Listener, type ListenerOptions } from '../proxy/server.js'
import { isUpgrade } from '../proxy/upgrade.js'
import type { ForwardCa } from './ca.js'
import { absoluteTarget, allowing, canonicalAddress, connectTarget, destinationOf, type Destination, type Lookup } from './destinations.js'
import { intercept, type Interception, type InterceptionOptions } from './interception.js'
import { ESTABLISHED, tunnel, type ConnectRefusal, type TunnelOptions } from './tunnel.js'
import { allowedAgent, passUntouched, type UntouchedOptions } from './untouched.js'

/** What a request on the forward proxy named, as rewriteUrl read it. */
interface Asked {
  destination?: Destination
  /** why it is answered at once, without going anywhere */
  refusal?: ErrorCode
  /** its target (path and query), as sent on */
  target: string
}

export interface ForwardProxyOptions {
  /** UPSTREAM_*: the bounds of what it passes on untouched and of its tunnels */
  upstream: UpstreamSettings
  settings: ForwardSettings
  /** the CA of the intercepted https origins; undefined when no route is https */
  ca: ForwardCa | undefined
  /** the routes it serves first (serve changes them) */
  routes: readonly Route[]
  listener: Omit<ListenerOptions, 'route' | 'forward'>
  /** the ports the sidecar listens on, which an allowed name never reaches on this host */
  ownPorts: () => readonly number[]
  /** replaces the resolver of allowed names (tests) */
  lookup?: Lookup
}

/**
 * The forward proxy (FORWARD_PROXY_PORT): the way in for applications that
 * keep their APIs' URLs and honour HTTPS_PROXY. Its destinations are the
 * routes: a request for a URL under a route's BASE_URL is routed, by its
 * origin, to that route, registered on this listener under its base path,
 * and goes through the same pipeline as on the route's own address. A
 * CONNECT to a route's https origin is answered, its TLS terminated with a
 * certificate of the forward CA for exactly that host, and the connection
 * handed to the same HTTP server: its requests are routed like any other.
 * Every other destination is refused, unless FORWARD_PROXY_ALLOW lets it
 * through untouched (a blind tunnel, or a request passed on as it came).
 */
export class ForwardProxy {
  readonly listener: Listener
  readonly #o: ForwardProxyOptions
  /** the routes by origin: the destinations that get a credential */
  #origins = new Map<string, Route[]>()
  /** the hosts of the https routes (hostKey), never asked over plain HTTP */
  #secureHosts = new Set<string>()
  readonly #asked = new WeakMap<IncomingMessage, Asked>()
  readonly #intercepted = new WeakMap<Duplex, Interception>()
  readonly #tunnels = new Set<Socket>()
  /** the connections to allowed destinations: each address checked before it is dialled */
  readonly #allowed: Agent
  readonly #interception: InterceptionOptions
  readonly #untouched: UntouchedOptions
  readonly #tunnelling: TunnelOptions

  constructor (o: ForwardProxyOptions) {
    this.#o = o
    this.listener = buildListener({
      ...o.listener,
      route: UNROUTED,
      forward: {
        rewriteUrl: (req) => this.#rewrite(req),
        origin: (req) => {
          const asked = this.#asked.get(req)
          return asked?.refusal === undefined ? asked?.destination?.origin : undefined
        },
        destination: (req) => this.#asked.get(req)?.destination?.origin,
        notFound: (request, reply) => this.#unrouted(request, reply),
        onConnect: (req, socket, head) => this.#connect(req, socket, head)
      }
    })
    this.#allowed = allowedAgent(o.settings.allow, o.upstream, o.ownPorts, o.lookup)
    const { events, log } = o.listener
    this.#interception = { ca: o.ca, headersTimeoutMs: o.listener.headersTimeoutMs ?? HEADERS_TIMEOUT_MS, log }
    this.#untouched = { timeouts: o.upstream, admission: this.listener.admission, events, log }
    this.#tunnelling = { upstream: o.upstream, events, log, ownPorts: o.ownPorts, lookup: o.lookup, tunnels: this.#tunnels }
  }

  /** Serves `routes` (from now on; the first ones by default) for the requests to their BASE_URLs. */
  serve (deps: RouteDeps, routes: readonly Route[] = this.#o.routes): void {
    const origins = new Map<string, Route[]>()
    const secureHosts = new Set<string>()
    for (const route of routes) {
      origins.set(route.config.origin, [...origins.get(route.config.origin) ?? [], route])
      if (route.config.origin.startsWith('https:')) secureHosts.add(hostKey(new URL(route.config.origin).hostname))
    }
    this.#origins = origins
    this.#secureHosts = secureHosts
    this.listener.table.set(routes.map((route) => route.entry(this.listener, deps, 'forward')))
  }

  /** Cuts the tunnels: they have no requests to let finish. */
  cutTunnels (): void {
    for (const socket of this.#tunnels) socket.destroy()
  }

  /** Closes the connections to allowed destinations (the listener has drained). */
  async close (): Promise<void> {
    this.cutTunnels()
    await this.#allowed.destroy()
  }

  /**
   * Reads what a request names: inside an intercepted connection, the
   * connection's destination (a Host or absolute URL naming another is
   * refused 421); otherwise its absolute URL. Routes see the path and query.
   */
  #rewrite (req: IncomingMessage): string {
    const url = req.url ?? ''
    const interception = this.#intercepted.get(req.socket)
    let asked: Asked
    if (interception !== undefined) {
      const { destination } = interception
      const scheme = destination.origin.startsWith('https:') ? 'https' : 'http'
      const absolute = url.startsWith('/') ? undefined : absoluteTarget(url)
      const named = absolute?.destination ?? (req.headers.host === undefined ? undefined : destinationOf(scheme, req.headers.host))
      const target = absolute?.target ?? url
      if (!target.startsWith('/')) asked = { destination, refusal: 'bad_request', target: '/' }
      else if (interception.misdirected || named === undefined || named.origin !== destination.origin) asked = { destination, refusal: 'misdirected_request', target }
      else asked = { destination, target }
    } else {
      const absolute = absoluteTarget(url)
      if (absolute === undefined) {
        // origin-form: a client that takes this port for a server
        asked = { refusal: 'bad_request', target: '/' }
      } else if (absolute.scheme === 'https' && this.#origins.has(absolute.destination.origin)) {
        // the credential would be added to a request the application sent in clear
        asked = { destination: absolute.destination, refusal: 'destination_not_allowed', target: absolute.target }
      } else if (absolute.scheme === 'http' && !this.#origins.has(absolute.destination.origin) && this.#secureHosts.has(hostKey(absolute.destination.hostname))) {
        // an https route's host in clear, on any port, whatever FORWARD_PROXY_ALLOW says:
        // the application's own Authorization would go out unencrypted to the API it is for
        asked = { destination: absolute.destination, refusal: 'destination_not_allowed', target: absolute.target }
      } else {
        asked = { destination: absolute.destination, target: absolute.target }
      }
    }
    this.#asked.set(req, asked)
    return asked.target
  }

  /**
   * What no route took: a refusal, a request on a route's origin outside
   * every base path (passed on without a credential), or one for another
   * destination (passed on untouched when allowed, refused otherwise).
   */
  #unrouted (request: FastifyRequest, reply: FastifyReply): void {
    const asked = this.#asked.get(request.raw)
    if (asked === undefined || asked.destination === undefined) return sendError(reply, asked?.refusal ?? 'bad_request')
    if (asked.refusal !== undefined) return this.#refuseRequest(reply, asked.refusal)
    const { destination } = asked
    // an upgrade to an untouched destination would need a relay of its own: not offered
    if (isUpgrade(request.raw)) return sendError(reply, 'bad_request')
    const routes = this.#origins.get(destination.origin)
    if (routes !== undefined) {
      // A route whose client certificate is its credential sends nothing untouched.
      const route = routes.find((r) => r.certificate === undefined)
      if (route === undefined) return this.#refuseRequest(reply, 'destination_not_allowed')
      return passUntouched(this.#untouched, request, reply, destination, asked.target, route.upstream.current, false)
    }
    if (allowing(this.#o.settings.allow, destination) === undefined) return this.#refuseRequest(reply, 'destination_not_allowed')
    // counted tunnelled once it is passed on, or refused when its name resolves to an address it may not reach
    passUntouched(this.#untouched, request, reply, destination, asked.target, this.#allowed, true)
  }

  #refuseRequest (reply: FastifyReply, code: ErrorCode): void {
    if (code === 'destination_not_allowed') this.#o.listener.events.emit('forward_connection', 'refused')
    sendError(reply, code)
  }

  /**
   * A CONNECT: a route's https origin is intercepted (TLS terminated here),
   * a route's http origin taken as plain HTTP, an allowed destination
   * tunnelled untouched, anything else refused. The connection counts among
   * the requests in progress while it is set up, a tunnel for its life.
   */
  #connect (req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const started = performance.now()
    const requestId = randomUUID()
    const authority = req.url ?? ''
    socket.on('error', () => socket.destroy())
    const line = (status: number, route: string, destination: Destination | undefined): void => {
      const entry: AccessLine = { requestId, route, method: 'CONNECT', path: authority.slice(0, 300), status, durationMs: Math.round((performance.now() - started) * 10) / 10, mode: 'forward' }
      if (destination !== undefined) entry.destination = destination.origin
      this.#o.listener.events.emit('response', entry)
    }
    const refuse: ConnectRefusal = (code, destination) => {
      // a 503 (overloaded, no certificate yet) passes: the client may try again in a second
      answerOnSocket(socket, code, ERRORS[code].status, requestId, ERRORS[code].status === 503 ? 1 : undefined)
      if (code === 'destination_not_allowed') this.#o.listener.events.emit('forward_connection', 'refused')
      line(ERRORS[code].status, UNROUTED, destination)
    }
    const secure = connectTarget(authority)
    if (secure === undefined) return refuse('bad_request')
    const plain = destinationOf('http', authority)!
    const release = this.listener.admission.hold()
    if (release === undefined) return refuse('overloaded', secure)
    const routes = this.#origins.get(secure.origin)
    if (routes !== undefined) {
      const answered = (): void => line(200, routes[0]!.name, secure)
      return intercept(this.#interception, socket, head, secure, release, refuse, answered, (tls, interception) => {
        this.#intercepted.set(tls, interception)
        this.#o.listener.events.emit('forward_connection', 'intercepted')
        this.listener.app.server.emit('connection', tls)
      })
    }
    const plainRoutes = this.#origins.get(plain.origin)
    if (plainRoutes !== undefined) {
      release()
      socket.write(ESTABLISHED)
      if (head.length > 0) socket.unshift(head)
      this.#intercepted.set(socket, { destination: plain, misdirected: false })
      this.#o.listener.events.emit('forward_connection', 'intercepted')
      line(200, plainRoutes[0]!.name, plain)
      this.listener.app.server.emit('connection', socket)
      return
    }
    const pattern = allowing(this.#o.settings.allow, secure)
    if (pattern === undefined) {
      release()
      return refuse('destination_not_allowed', secure)
    }
    tunnel(this.#tunnelling, socket, head, secure, pattern, requestId, release, refuse, (status) => line(status, UNROUTED, secure))
  }
}

/** A host as the machine it names, whatever its spelling: an IP address canonical (IPv4-mapped as IPv4), a name without its trailing dot. */
function hostKey (hostname: string): string {
  const host = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname
  return canonicalAddress(host)?.address ?? host.replace(/\.$/, '')
}
