import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'

export interface AccessLine {
  requestId: string
  /** the route that served the request */
  route: string
  method: string
  /** the request target without its query */
  path: string
  /** 499: the client left before the answer was complete */
  status: number
  durationMs: number
  /** the forward proxy's requests and connections: `forward` */
  mode?: 'forward'
  /** the forward proxy's: the origin asked for */
  destination?: string
  /** with tracing on, the request's SERVER span */
  trace_id?: string
  span_id?: string
}

/** The request target without its query, as the access log shows it. */
export function pathOf (url: string): string {
  const q = url.indexOf('?')
  return q === -1 ? url : url.slice(0, q)
}

declare module 'fastify' {
  interface FastifyRequest {
    /** performance.now() on arrival, for the line of an abandoned request */
    sidecarStarted: number
    /** the upstream failed after its answer had begun: the line says 502, not the client's 499 */
    sidecarUpstreamFailed: boolean
  }
}

/**
 * The access line of a request: its route is the one it was routed to, or
 * the listener's own for what no route took (a target the router refused).
 */
export function accessLine (request: FastifyRequest, status: number, ms: number, listenerRoute: string, destination?: (req: FastifyRequest['raw']) => string | undefined): AccessLine {
  const line: AccessLine = {
    requestId: request.id,
    route: request.sidecarRoute?.context.route.name ?? listenerRoute,
    method: request.raw.method ?? '',
    path: pathOf(request.raw.url ?? ''),
    status,
    durationMs: Math.round(ms * 10) / 10
  }
  const trace = request.sidecarTrace
  if (trace !== undefined) {
    line.trace_id = trace.ids.trace_id
    line.span_id = trace.ids.span_id
  }
  if (destination === undefined) return line
  line.mode = 'forward'
  const origin = destination(request.raw)
  if (origin !== undefined) line.destination = origin
  return line
}

export interface AccessLogOptions {
  /** the route of requests no route took */
  route: string
  onResponse: (line: AccessLine) => void
  /** the forward proxy's listener: what a request is for */
  destination?: (req: FastifyRequest['raw']) => string | undefined
}

/**
 * One call per request, answered or abandoned: the access line and the
 * request metrics; with tracing on, its span ends with the line's status.
 */
export const accessLog = fp<AccessLogOptions>(async function accessLog (app: FastifyInstance, { route, onResponse, destination }) {
  app.decorateRequest('sidecarStarted', 0)
  app.decorateRequest('sidecarUpstreamFailed', false)
  // set by the routes' tracing hooks, when tracing is on
  app.decorateRequest('sidecarTrace', undefined)
  app.addHook('onRequest', (request, _reply, done) => {
    request.sidecarStarted = performance.now()
    done()
  })
  app.addHook('onResponse', (request, reply, done) => {
    // an answer written to a client already gone (an upload it gave up) is the client's 499
    const status = request.sidecarUpstreamFailed ? 502 : reply.raw.writableFinished ? reply.statusCode : 499
    request.sidecarTrace?.end(status)
    onResponse(accessLine(request, status, reply.elapsedTime, route, destination))
    done()
  })
  app.addHook('onRequestAbort', (request, done) => {
    const status = request.sidecarUpstreamFailed ? 502 : 499
    request.sidecarTrace?.end(status)
    onResponse(accessLine(request, status, performance.now() - request.sidecarStarted, route, destination))
    done()
  })
}, { name: 'auth-sidecar-access-log' })
