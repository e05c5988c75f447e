import { randomUUID } from 'node:crypto'
import { METHODS, type IncomingMessage } from 'node:http'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify'
import type pino from 'pino'
import type { Dispatcher } from 'undici'
import type { Config } from '../config/load.js'
import type { AuthorizationSource } from '../token/source.js'
import { accessLog, type AccessLine } from './access-log.js'
import { admission } from './admission.js'
import { authorize } from './authorize.js'
import { clientErrors } from './client-errors.js'
import type { DpopRefusal } from './dpop-challenge.js'
import { forward, type UpstreamErrorReason } from './forward.js'
import { guard, REFUSED_METHODS } from './guard.js'
import { REQUEST_ID } from './headers.js'
import { sendError } from './replies.js'
import { WebSocketProxy } from './websocket.js'

export interface ProxyOptions {
  /** `scheme://host[:port]` of BASE_URL */
  origin: string
  /** BASE_URL's path without the trailing slash, '' for none */
  basePath: string
  /** verifies TLS; closed by whoever created it */
  dispatcher: Dispatcher
  /** most requests in progress at once (PROXY_MAX_REQUESTS) */
  maxRequests: number
  /** UPSTREAM_TIMEOUT_MS, for WebSocket handshakes (HTTP requests have the dispatcher's) */
  upstreamTimeoutMs: number
  /** WEBSOCKET_MAX_MESSAGE_BYTES */
  websocketMaxMessageBytes: number
  /** the egress proxy, for WebSocket handshakes (HTTP requests have the dispatcher) */
  egress: Config['egress']
  /** how long a client may take to send its request headers; 60 s, shorter in tests */
  headersTimeoutMs?: number
  tokens: AuthorizationSource
  log: pino.Logger
  /** one call per request, answered or abandoned (the access log and metrics) */
  onResponse: (line: AccessLine) => void
  /** the sidecar answered 502 or 504 itself, for this reason */
  onUpstreamError: (reason: UpstreamErrorReason) => void
  /** the upstream refused a DPoP proof (a 401 with a DPoP error), for this reason */
  onDpopRefused: (reason: DpopRefusal) => void
}

export interface ProxyServer {
  app: FastifyInstance
  /** Closes the open WebSockets (the HTTP side drains through the server's close). */
  closeWebSockets(): void
}

/** Request headers must be complete within this, or the client gets 408 and the connection is closed. */
export const HEADERS_TIMEOUT_MS = 60_000
/** Every method Node parses, but those refused: any other method is forwarded. */
const FORWARDED_METHODS = METHODS.filter((m) => !REFUSED_METHODS.has(m))

/**
 * The proxy listener: a Fastify server whose every route forwards to
 * BASE_URL. Its parts, in the order a request meets them: admission
 * (bounds), guard (what may not be forwarded), authorize (the token),
 * forward (@fastify/http-proxy), and the access log; WebSocket upgrades
 * have a handler of their own.
 */
export async function buildProxy (o: ProxyOptions): Promise<ProxyServer> {
  const headersTimeout = o.headersTimeoutMs ?? HEADERS_TIMEOUT_MS
  // What Fastify and @fastify/reply-from log through a request's logger
  // (every upstream error as a warning with its stack trace) is said once,
  // without a stack, by the sidecar's own lines: only errors pass.
  const requestLog = o.log.child({}, { level: 'error' })
  const refusals = clientErrors(o.onResponse)
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
    o.log.error({ requestId: request.id, err: { type: err.name, code: (err as { code?: string }).code } }, 'internal error')
    sendError(reply, 'internal_error')
  })

  await app.register(accessLog, { onResponse: o.onResponse })
  await app.register(admission, { maxRequests: o.maxRequests })
  await app.register(guard)
  await app.register(authorize, { tokens: o.tokens })
  await app.register(forward, {
    origin: o.origin,
    basePath: o.basePath,
    methods: FORWARDED_METHODS,
    dispatcher: o.dispatcher,
    tokens: o.tokens,
    log: o.log,
    onUpstreamError: o.onUpstreamError,
    onDpopRefused: o.onDpopRefused
  })

  // @fastify/http-proxy's own WebSocket support completes the client's
  // handshake before it connects upstream and offers the upstream only one
  // subprotocol, so an upstream 401 would reach the client as 101 then
  // close 1011: the sidecar's handler answers with the upstream's verdict.
  const ws = new WebSocketProxy({
    origin: o.origin,
    basePath: o.basePath,
    tokens: o.tokens,
    log: o.log,
    timeoutMs: o.upstreamTimeoutMs,
    maxMessageBytes: o.websocketMaxMessageBytes,
    egress: o.egress,
    onSession: o.onResponse,
    onDpopRefused: o.onDpopRefused
  })
  app.server.on('upgrade', ws.upgrade)
  app.server.on('connect', refusals.onConnect)
  return { app, closeWebSockets: () => ws.close() }
}

/** The client's X-Request-Id when it looks like an id, else a new one. */
function requestIdOf (req: IncomingMessage): string {
  const id = req.headers['x-request-id']
  return typeof id === 'string' && REQUEST_ID.test(id) ? id : randomUUID()
}
