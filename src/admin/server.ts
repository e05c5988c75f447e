import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from 'fastify'
import type pino from 'pino'
import type { Registry } from 'prom-client'

/** The longest a client may take to send a whole request to the admin port. */
export const ADMIN_REQUEST_TIMEOUT_MS = 10_000

export interface AdminOptions {
  registry: Registry
  /** undefined when ready, else why not (and, with named routes, each route's reason) */
  notReady(): { reason: string, routes?: Record<string, string> } | undefined
  log: pino.Logger
}

/**
 * Liveness, readiness and metrics on their own listener, so that
 * probes keep answering whatever the proxy port is doing.
 */
export function buildAdmin (opts: AdminOptions): FastifyInstance {
  const app = Fastify({
    loggerInstance: opts.log as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    // The port is reached from beyond the pod: a request slower than this
    // holds one of its few connections (ADMIN_MAX_CONNECTIONS) no longer.
    requestTimeout: ADMIN_REQUEST_TIMEOUT_MS,
    frameworkErrors: (_err, _request, reply) => { send(reply, 400, { error: 'bad_request' }) }
  })
  // Every endpoint is a GET: a request with a body is refused before any of
  // it is read, and its connection closed, so that a slow body cannot keep
  // a connection busy.
  app.addHook('onRequest', (request, reply, done) => {
    const { headers } = request
    if (headers['transfer-encoding'] === undefined && (headers['content-length'] ?? '0') === '0') return done()
    reply.header('connection', 'close')
    send(reply, request.method === 'GET' || request.method === 'HEAD' ? 400 : 405, { error: request.method === 'GET' || request.method === 'HEAD' ? 'bad_request' : 'method_not_allowed' })
  })
  app.get('/healthz', (_request, reply) => { send(reply, 200, { status: 'ok' }) })
  app.get('/readyz', (_request, reply) => {
    const why = opts.notReady()
    if (why === undefined) send(reply, 200, { status: 'ready' })
    else send(reply, 503, { status: 'not_ready', ...why })
  })
  app.get('/metrics', async (_request, reply) => {
    const text = await opts.registry.metrics()
    reply.header('content-type', opts.registry.contentType)
    return text
  })
  app.setNotFoundHandler((request, reply) => {
    if (request.method !== 'GET' && request.method !== 'HEAD') send(reply, 405, { error: 'method_not_allowed' })
    else send(reply, 404, { error: 'not_found' })
  })
  app.setErrorHandler((err: Error, _request, reply) => {
    opts.log.error({ err: { type: err.name, message: err.message } }, 'admin endpoint failed')
    send(reply, 500, { error: 'internal_error' })
  })
  return app
}

function send (reply: FastifyReply, status: number, body: object): void {
  reply.code(status).header('content-type', 'application/json; charset=utf-8').send(JSON.stringify(body))
}
