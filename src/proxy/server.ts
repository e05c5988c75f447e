import { randomUUID } from 'node:crypto'
import type { EventEmitter } from 'node:events'
import { METHODS, type IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import type pino from 'pino'
import { accessLog, type AccessLine } from './access-log.js'
import { Admission } from './admission.js'
import { clientErrors } from './client-errors.js'
import type { ProxyEvents } from './context.js'
import { guard, REFUSED_METHODS } from './guard.js'
import { REQUEST_ID } from './headers.js'
import type { RequestBudget } from './request-budget.js'
import { sendError } from './replies.js'
import { serveRoutes } from './route.js'
import { RouteTable } from './route-table.js'
import { routeUpgrades } from './upgrade.js'
import { NO_TRACING, type Tracing } from '../tracing/tracing.js'
import { WebSocketSessions } from './websocket.js'

export interface ListenerOptions {
  /** the route of what no route takes (the default route's on PROXY_PORT, a port route's own) */
  route: string
  /** the requests in progress over all listeners, and each route's (PROXY_MAX_REQUESTS, PROXY_ROUTE_MAX_REQUESTS) */
  budget: RequestBudget
  /** how long a client may take to send its request headers; 60 s, shorter in tests */
  headersTimeoutMs?: number
  log: pino.Logger
  events: EventEmitter<ProxyEvents>
  /** spans for its requests; none by default */
  tracing?: Tracing
  /** makes it the forward proxy's listener (src/forward/proxy.ts) */
  forward?: ForwardHooks
}

/**
 * What makes a listener a forward proxy: requests name their destination
 * (an absolute URL, or the connection they came in on), routes are found by
 * it, and CONNECT opens connections rather than being refused.
 */
export interface ForwardHooks {
  /** the request's target as the routes see it (its path and query); what it names is kept for `destination` */
  rewriteUrl: (req: IncomingMessage) => string
  /** the origin whose routes may take a request; undefined: none may */
  origin: (req: IncomingMessage) => string | undefined
  /** the origin a request asked for, for its access line */
  destination: (req: IncomingMessage) => string | undefined
  /** a request no route takes */
  notFound: (request: FastifyRequest, reply: FastifyReply) => void
  onConnect: (req: IncomingMessage, socket: Duplex, head: Buffer) => void
}

declare module 'fastify' {
  interface FastifyInstance {
    /** the listener's bounds, which every route registered on it shares */
    sidecarAdmission: Admission
    /** the listener's WebSocket sessions, closed together on shutdown */
    sidecarWebSockets: WebSocketSessions
  }
}

/** One listener: its Fastify instance, the routes it serves, and what they share. */
export interface Listener {
  app: FastifyInstance
  table: RouteTable
  admission: Admission
  websockets: WebSocketSessions
}

/** Request headers must be complete within this, or the client gets 408 and the connection is closed. */
export const HEADERS_TIMEOUT_MS = 60_000
/** Every method Node parses, but those refused: any other method is forwarded. */
export const FORWARDED_METHODS = METHODS.filter((m) => !REFUSED_METHODS.has(m))

/**
 * A proxy listener (PROXY_PORT, or a route's own port): a Fastify server
 * whose routes forward to their upstreams. What holds for every request on
 * it, in the order a request meets it: the access log, its route looked up
 * in the table, admission (bounds), the guard (what may not be forwarded);
 * then the route (route.ts). WebSocket upgrades take the same way
 * (upgrade.ts).
 */
export function buildListener (o: ListenerOptions): Listener {
  const headersTimeout = o.headersTimeoutMs ?? HEADERS_TIMEOUT_MS
  const onResponse = (line: AccessLine): void => { o.events.emit('response', line) }
  // What Fastify logs through a request's logger (every error as a
  // warning with its stack trace) is said once, without a stack, by the
  // sidecar's own lines: only errors pass.
  const requestLog = o.log.child({}, { level: 'error' })
  const refusals = clientErrors(o.route, onResponse)
  const app = Fastify({
    loggerInstance: o.log as FastifyBaseLogger,
    // The access log is the sidecar's own line per request (src/proxy/access-log.ts).
    logController: new LogController({ disableRequestLogging: true }),
    genReqId: requestIdOf,
    // One for all requests: the sidecar's lines carry the request id
    // themselves, and a child logger per request re-ran pino's redaction on
    // its bindings, a few percent of a request's CPU.
    childLoggerFactory: () => requestLog,
    // A long upload is not cut by a whole-request timeout; slow headers are:
    // Node answers 408 and closes.
    requestTimeout: 0,
    http: { headersTimeout, connectionsCheckingInterval: Math.min(5_000, headersTimeout) },
    // Endpoints are removed after SIGTERM, so requests keep arriving on
    // kept-alive connections for a few seconds: they are served, not
    // answered 503. The shutdown drains first and closes after.
    return503OnClosing: false,
    exposeHeadRoutes: false,
    routerOptions: { maxParamLength: 65_535 },
    clientErrorHandler: refusals.onClientError,
    ...(o.forward !== undefined && { rewriteUrl: o.forward.rewriteUrl }),
    frameworkErrors: (err, request, reply) => {
      o.log.debug({ requestId: request.id, code: (err as { code?: string }).code }, 'request refused by the router')
      sendError(reply, 'bad_request')
    }
  })
  for (const method of FORWARDED_METHODS) {
    if (!app.supportedMethods.includes(method)) app.addHttpMethod(method, { hasBody: true })
  }
  app.setErrorHandler((err: Error & { statusCode?: number, code?: string }, request, reply) => {
    if (err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500) {
      return sendError(reply, 'bad_request', { status: err.statusCode === 405 ? 405 : 400 })
    }
    // the upstream's answer failed before any of it reached the client
    // (src/proxy/forward.ts has logged and counted it)
    if (err.code === 'UND_ERR_BODY_TIMEOUT') return sendError(reply, 'upstream_timeout')
    if (err.code?.startsWith('UND_ERR_') === true || err.code === 'ECONNRESET') return sendError(reply, 'upstream_unreachable')
    o.log.error({ requestId: request.id, err: { type: err.name, code: err.code } }, 'internal error')
    sendError(reply, 'internal_error')
  })
  // What no route takes: a method that is not forwarded (the guard answers it).
  app.setNotFoundHandler((_request, reply) => { sendError(reply, 'method_not_allowed', { status: 405 }) })

  const table = new RouteTable()
  const admission = new Admission(o.budget)
  const websockets = new WebSocketSessions()
  app.decorate('sidecarAdmission', admission)
  app.decorate('sidecarWebSockets', websockets)
  app.decorateRequest('sidecarRoute', undefined)
  app.decorateRequest('sidecarTarget', undefined)
  app.decorateRequest('sidecarInProgress', false)
  app.register(accessLog, { route: o.route, onResponse, ...(o.forward !== undefined && { destination: o.forward.destination }) })
  const forwardHooks = o.forward
  app.addHook('onRequest', forwardHooks === undefined
    ? (request, _reply, done) => { table.route(request); done() }
    : (request, _reply, done) => {
        const origin = forwardHooks.origin(request.raw)
        if (origin !== undefined) table.route(request, origin)
        done()
      })
  app.register(admission.plugin)
  app.register(guard)
  app.register(serveRoutes, { methods: FORWARDED_METHODS, tracing: o.tracing ?? NO_TRACING, ...(forwardHooks !== undefined && { unrouted: forwardHooks.notFound }) })
  routeUpgrades(app)
  app.server.on('connect', forwardHooks?.onConnect ?? refusals.onConnect)
  return { app, table, admission, websockets }
}

/** The client's X-Request-Id when it looks like an id, else a new one. */
function requestIdOf (req: IncomingMessage): string {
  const id = req.headers['x-request-id']
  return typeof id === 'string' && REQUEST_ID.test(id) ? id : randomUUID()
}
