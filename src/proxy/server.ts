import { randomUUID } from 'node:crypto'
import { METHODS, type IncomingMessage } from 'node:http'
import httpProxy from '@fastify/http-proxy'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import type pino from 'pino'
import type { Dispatcher } from 'undici'
import { errorBody, ERRORS, TokenUnavailableError, type ErrorCode } from '../errors.js'
import type { UpstreamErrorReason } from '../admin/metrics.js'
import type { Config } from '../config/load.js'
import type { AuthorizationSource } from '../token/manager.js'
import { isConfined, pathOf } from './confine.js'
import { PipelineGate } from './pipeline.js'
import { hasAmbiguousHeaders, REQUEST_ID, relayedResponseHeaders, upstreamRequestHeaders, type HeaderValues } from './headers.js'
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
  /** UPSTREAM_TIMEOUT_MS, for WebSocket handshakes (HTTP requests have the dispatcher's headersTimeout) */
  upstreamTimeoutMs: number
  /** the egress proxy, for WebSocket handshakes (HTTP requests have the dispatcher) */
  egress: Config['egress']
  /** how long a client may take to send its request headers; 60 s (SPEC §10.4), shorter in tests */
  headersTimeoutMs?: number
  tokens: AuthorizationSource
  log: pino.Logger
  /** the access log: one call per request, answered or abandoned */
  onResponse: (line: AccessLine) => void
  /** the sidecar answered 502 or 504 itself, for this reason */
  onUpstreamError: (reason: UpstreamErrorReason) => void
}

export interface AccessLine {
  requestId: string
  method: string
  /** the request target without its query */
  path: string
  /** 499: the client left before the answer was complete */
  status: number
  durationMs: number
}

export interface ProxyServer {
  app: FastifyInstance
  /** Closes the open WebSockets (the HTTP side drains through the server's close). */
  closeWebSockets(): void
}

/** TRACE would echo the injected Authorization header back to the client; CONNECT never reaches a route. */
const REFUSED_METHODS = new Set(['TRACE', 'CONNECT'])
/** Idempotent methods without a body may be sent again when a pooled socket turned out dead. */
const RETRYABLE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS'])
/** The errors of a kept-alive socket that the upstream closed under the request. */
const STALE_SOCKET_ERRORS = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE'])
/** Errors that mean the upstream took the connection but closed it under the request. */
const RESET_ERRORS = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE', 'UND_ERR_CLOSED'])
/** Request headers must be complete within this (SPEC §10.4). */
export const HEADERS_TIMEOUT_MS = 60_000
/** Every method Node parses, but those refused: SPEC §3.1 forwards any method. */
const FORWARDED_METHODS = METHODS.filter((m) => !REFUSED_METHODS.has(m))

// Per-request state, declared up front with decorateRequest so that every
// request object keeps one shape.
declare module 'fastify' {
  interface FastifyRequest {
    /** the Authorization header value sent upstream */
    sidecarAuthorization: string
    /** the upstream path http-proxy computed, for a replay */
    sidecarDestination: string
    sidecarReplayed: boolean
    /** performance.now() on arrival, for the line of an abandoned request */
    sidecarStarted: number
    /** counted among the requests in progress */
    sidecarCounted: boolean
    /** counted among its connection's unanswered requests */
    sidecarOnLine: boolean
  }
}

/**
 * The proxy listener (SPEC §3): a Fastify server whose every route is
 * @fastify/http-proxy over the sidecar's own undici dispatcher. What the
 * plugin's defaults get wrong for us is set here, each with its test:
 * TLS verification (test/e2e/tls.test.ts), errors and retries
 * (test/proxy/errors.test.ts, upstream-faults.test.ts), confinement
 * (confinement.test.ts), timeouts, the 401 replay (upstream-401.test.ts).
 */
export async function buildProxy (o: ProxyOptions): Promise<ProxyServer> {
  const upstreamHost = new URL(o.origin).host
  const app = Fastify({
    loggerInstance: o.log as FastifyBaseLogger,
    // Fastify's two lines per request cost 6 µs with their serializers; the
    // sidecar writes one line of its own (PITFALLS, "where a request's CPU goes").
    logController: new LogController({ disableRequestLogging: true }),
    // no child logger per request: no request-bound field is logged through it
    childLoggerFactory: (logger) => logger,
    genReqId: requestIdOf,
    // A long upload is not cut by a whole-request timeout; slow headers are:
    // Node answers 408 and closes (SPEC §10.4), checked every few seconds.
    requestTimeout: 0,
    http: { headersTimeout: o.headersTimeoutMs ?? HEADERS_TIMEOUT_MS, connectionsCheckingInterval: Math.min(5_000, o.headersTimeoutMs ?? HEADERS_TIMEOUT_MS) },
    // Requests already on kept-alive connections when SIGTERM comes are
    // served, not answered 503: drain first, close after (PITFALLS, Kubernetes).
    return503OnClosing: false,
    exposeHeadRoutes: false,
    routerOptions: { maxParamLength: 65_535 },
    frameworkErrors: (err, request, reply) => {
      o.log.debug({ requestId: request.id, code: (err as { code?: string }).code }, 'request refused by the router')
      sendError(reply, 'bad_request')
    }
  })
  for (const method of FORWARDED_METHODS) {
    if (!app.supportedMethods.includes(method)) app.addHttpMethod(method, { hasBody: true })
  }
  app.decorateRequest('sidecarAuthorization', '')
  app.decorateRequest('sidecarDestination', '')
  app.decorateRequest('sidecarReplayed', false)
  app.decorateRequest('sidecarStarted', 0)
  app.decorateRequest('sidecarCounted', false)
  app.decorateRequest('sidecarOnLine', false)

  // Before the plugin sees anything: its own checks let `//host/x` and
  // double-encoded dot segments through and normalise `/a/./b` (PITFALLS).
  // Then the token: rewriteRequestHeaders is synchronous, so the header must
  // be at hand before the request is proxied.
  // Requests in progress, counted until they are answered or abandoned (the
  // onResponse and onRequestAbort hooks below; a response's own 'close' is
  // not emitted for pipelined requests still queued when the client leaves):
  // beyond the cap the sidecar answers 503 at once rather than queue without
  // bound (SPEC §10.4; Envoy's circuit breakers default to 1,024).
  let inProgress = 0
  // A connection's pipelined requests are read as they are answered (SPEC
  // §10.4, src/proxy/pipeline.ts); held requests are not yet in progress, so
  // one flooding connection cannot take every slot.
  const pipeline = new PipelineGate()
  const release = (request: FastifyRequest): void => {
    if (request.sidecarCounted) {
      request.sidecarCounted = false
      inProgress--
    }
    if (request.sidecarOnLine) {
      request.sidecarOnLine = false
      pipeline.leave(request.raw.socket)
    }
  }
  app.addHook('onRequest', function onArrival (request, reply, done) {
    request.sidecarStarted = performance.now()
    request.sidecarOnLine = true
    const socket = request.raw.socket
    if (pipeline.enter(socket)) return confineAndAuthorize(request, reply, done)
    pipeline.hold(socket, () => {
      if (request.sidecarOnLine && !request.raw.destroyed) confineAndAuthorize(request, reply, done)
    })
  })
  function confineAndAuthorize (request: FastifyRequest, reply: FastifyReply, done: () => void): void {
    const raw = request.raw
    if (inProgress >= o.maxRequests) return sendError(reply, 'overloaded', undefined, '1')
    inProgress++
    request.sidecarCounted = true
    if (!isConfined(raw.url ?? '')) return sendError(reply, 'bad_request')
    if (REFUSED_METHODS.has(raw.method ?? '')) return sendError(reply, 'bad_request', 405)
    if (hasAmbiguousHeaders(raw.rawHeaders, raw.headers.connection)) return sendError(reply, 'bad_request')
    const header = o.tokens.current()
    if (header !== undefined) {
      request.sidecarAuthorization = header
      return done()
    }
    o.tokens.authorization().then((h) => {
      request.sidecarAuthorization = h
      done()
    }, (err: unknown) => tokenUnavailable(reply, err))
  }

  app.addHook('onResponse', function accessLog (request, reply, done) {
    release(request)
    o.onResponse(accessLine(request, reply.statusCode, reply.elapsedTime))
    done()
  })
  app.addHook('onRequestAbort', function abandoned (request, done) {
    release(request)
    o.onResponse(accessLine(request, 499, performance.now() - request.sidecarStarted))
    done()
  })

  app.setErrorHandler((err: Error & { statusCode?: number }, request, reply) => {
    if (err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500) {
      return sendError(reply, 'bad_request', err.statusCode === 405 ? 405 : 400)
    }
    request.log.error({ requestId: request.id, err: { type: err.name, code: (err as { code?: string }).code } }, 'internal error')
    sendError(reply, 'internal_error')
  })

  /** http-proxy's reply options (ours, with its header rewriting), for a replay */
  let routeOptions: object | undefined
  await app.register(httpProxy, {
    upstream: o.origin + o.basePath,
    httpMethods: FORWARDED_METHODS,
    // The sidecar's pool: TLS verified, UPSTREAM_TIMEOUT_MS for the response
    // headers and UPSTREAM_IDLE_TIMEOUT_MS for silence in a body, which one
    // `timeout` option would conflate (PITFALLS).
    undici: o.dispatcher as never,
    disableRequestLogging: true,
    // Location is relayed as the upstream wrote it.
    internalRewriteLocationHeader: false,
    // WebSockets stay with the sidecar's own upgrade handler (below).
    websocket: false,
    handler (request, reply, dest, options) {
      request.sidecarDestination = dest
      routeOptions = options
      return reply.from(dest, options)
    },
    replyOptions: {
      rewriteRequestHeaders (request, headers) {
        const h = headers as HeaderValues
        // Fastify does not read a GET or HEAD body, so none is sent: the
        // upstream must not wait for one.
        if (request.method === 'GET' || request.method === 'HEAD') h['content-length'] = undefined
        return upstreamRequestHeaders(h, request.raw.headers.host, {
          authorization: request.sidecarAuthorization,
          host: upstreamHost,
          requestId: request.id,
          clientIp: request.raw.socket.remoteAddress
        }) as Record<string, string>
      },
      rewriteHeaders (headers, request) {
        return relayedResponseHeaders(headers as HeaderValues, (request as FastifyRequest).id) as Record<string, string>
      },
      // Only a stale pooled socket, once, for a bodiless idempotent request;
      // reply-from's default retries a GET answered 503 ten times.
      retryDelay ({ err, req, attempt }) {
        if (attempt > 0 || err == null) return null
        const code = (err as { code?: string }).code ?? ''
        const body = (req as { body?: unknown } | undefined)?.body
        if (!STALE_SOCKET_ERRORS.has(code) || !RETRYABLE_METHODS.has(req?.method ?? '') || (body != null && body !== '')) return null
        return 1 // ms; reply-from takes 0 for "no retry"
      },
      onResponse (request, reply, res) {
        const stream = res.stream as NodeJS.ReadableStream & { destroy(): void }
        if (reply.sent) return stream.destroy() // an invalid status code was already answered 502
        if (res.statusCode === 401) return upstreamRejected(request as FastifyRequest, reply as FastifyReply, res.stream)
        o.tokens.accepted()
        reply.send(res.stream)
      },
      onError (reply, { error }) {
        const cause = (error as { cause?: { code?: string } }).cause
        const code = cause?.code ?? (error as { code?: string }).code
        const timedOut = code === 'UND_ERR_HEADERS_TIMEOUT' || (error as { statusCode?: number }).statusCode === 504
        o.log.warn({ requestId: reply.request.id, upstreamError: code ?? error.name }, 'upstream request failed')
        o.onUpstreamError(timedOut ? 'timeout' : RESET_ERRORS.has(code ?? '') ? 'reset' : 'unreachable')
        sendError(reply as FastifyReply, timedOut ? 'upstream_timeout' : 'upstream_unreachable')
      }
    }
  })

  /**
   * Upstream 401 (SPEC §3.8): the token is dropped and renewed (once per
   * rejected token, in the token manager); a request without a body is sent
   * once more with the new token, one with a body gets the 401.
   */
  function upstreamRejected (request: FastifyRequest, reply: FastifyReply, body: unknown): void {
    const renewing = o.tokens.rejected(request.sidecarAuthorization)
    if (!renewing || request.sidecarReplayed || hasBody(request.raw.headers as HeaderValues)) {
      reply.send(body)
      return
    }
    request.sidecarReplayed = true
    ;(body as NodeJS.ReadableStream).resume()
    // nothing of the 401 may leak into the replay's answer
    for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name)
    o.tokens.authorization().then((header) => {
      request.sidecarAuthorization = header
      reply.from(request.sidecarDestination, routeOptions)
    }, (err: unknown) => tokenUnavailable(reply, err))
  }

  const ws = new WebSocketProxy({
    origin: o.origin,
    basePath: o.basePath,
    tokens: o.tokens,
    log: o.log,
    timeoutMs: o.upstreamTimeoutMs,
    egress: o.egress,
    onSession: (line) => o.onResponse(line)
  })
  // The plugin's WebSocket support completes the client's handshake before
  // it connects upstream and offers the upstream only one subprotocol, so an
  // upstream 401 reaches the client as 101 then close 1011 (PITFALLS). The
  // sidecar's own handler answers the client with the upstream's verdict.
  app.server.on('upgrade', ws.upgrade)
  return { app, closeWebSockets: () => ws.close() }
}

/** The client's X-Request-Id when it looks like an id, else a new one. */
function requestIdOf (req: IncomingMessage): string {
  const id = req.headers['x-request-id']
  return typeof id === 'string' && REQUEST_ID.test(id) ? id : randomUUID()
}

function hasBody (headers: HeaderValues): boolean {
  const length = headers['content-length']
  return headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0')
}

function accessLine (request: FastifyRequest, status: number, ms: number): AccessLine {
  return {
    requestId: request.id,
    method: request.raw.method ?? '',
    path: pathOf(request.raw.url ?? ''),
    status,
    durationMs: Math.round(ms * 10) / 10
  }
}

function tokenUnavailable (reply: FastifyReply, err: unknown): void {
  const seconds = err instanceof TokenUnavailableError ? err.retryAfterSeconds : 1
  sendError(reply, 'token_unavailable', undefined, String(seconds))
}

/** The sidecar's own answers (SPEC §3.7): JSON, no internal detail. */
function sendError (reply: FastifyReply, code: ErrorCode, status: number = ERRORS[code].status, retryAfter?: string): void {
  if (reply.sent || reply.raw.headersSent) return
  reply.code(status)
  reply.header('content-type', 'application/json; charset=utf-8')
  reply.header('x-request-id', reply.request.id)
  if (retryAfter !== undefined) reply.header('retry-after', retryAfter)
  reply.send(errorBody(code))
}
