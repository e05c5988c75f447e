import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from 'fastify'
import type { Server } from 'node:https'
import type pino from 'pino'
import { mutate } from './mutate.js'
import { ReviewError } from './review.js'

/**
 * The largest review read. The API server takes objects of at most 3 MiB,
 * and an AdmissionReview carries the object (and, for an update, the old
 * one) with a little more.
 */
export const MAX_REVIEW_BYTES = 8 * 1024 * 1024
/** The longest a caller may take to send one request; the API server's own webhook timeout is at most 30 s. */
export const REQUEST_TIMEOUT_MS = 30_000

export interface WebhookOptions {
  image: string
  tls: { cert: string, key: string }
  log: pino.Logger
}

export interface Webhook {
  app: FastifyInstance<Server>
  /** /readyz answers 503 from now on, and keep-alive connections are let go (see buildWebhook) */
  stopping(): void
}

/**
 * POST /mutate, /healthz and /readyz over HTTPS. Whatever is not an
 * AdmissionReview for a Pod (not JSON, another content type, too large,
 * another kind) is answered 400 and changes nothing. Once stopping, every
 * answer carries `Connection: close` and idle keep-alive connections are
 * closed, so that the API server opens its next connection to another
 * replica instead of reusing one to a webhook that is about to close.
 */
export function buildWebhook (o: WebhookOptions): Webhook {
  const app = Fastify({
    https: { cert: o.tls.cert, key: o.tls.key, minVersion: 'TLSv1.2' },
    loggerInstance: o.log as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: MAX_REVIEW_BYTES,
    requestTimeout: REQUEST_TIMEOUT_MS,
    frameworkErrors: (_err, _request, reply) => { send(reply, 400, { error: 'bad_request' }) }
  })
  let stopping = false
  // onSend rather than onRequest: a review whose headers arrived before the
  // drain began is answered after it, and its connection must go too.
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (stopping) reply.header('connection', 'close')
    done(null, payload)
  })

  app.get('/healthz', (_request, reply) => { send(reply, 200, { status: 'ok' }) })
  app.get('/readyz', (_request, reply) => {
    if (stopping) send(reply, 503, { status: 'not_ready', reason: 'shutting down' })
    else send(reply, 200, { status: 'ready' })
  })
  app.post('/mutate', (request, reply) => {
    const { response, outcome } = mutate(request.body, o.image)
    o.log.info({ event: 'admission', ...outcome }, outcome.injected ? 'sidecar injected' : 'pod allowed unchanged')
    send(reply, 200, response)
  })
  app.setNotFoundHandler((_request, reply) => { send(reply, 404, { error: 'not_found' }) })
  app.setErrorHandler((err: Error & { statusCode?: number, code?: string }, request, reply) => {
    // a body that is no Pod's review, or one Fastify's parser refused (not JSON, too large, no content type)
    if (err instanceof ReviewError || (err.statusCode !== undefined && err.statusCode < 500)) {
      const message = err instanceof ReviewError ? err.message : err.code === 'FST_ERR_CTP_BODY_TOO_LARGE' ? `the body is larger than ${MAX_REVIEW_BYTES} bytes` : 'the body is not an AdmissionReview in JSON'
      o.log.warn({ event: 'admission', path: request.url, reason: message }, 'request refused')
      send(reply, 400, { error: 'bad_request', message })
      return
    }
    o.log.error({ err: { type: err.name, message: err.message } }, 'admission review failed')
    send(reply, 500, { error: 'internal_error' })
  })
  return {
    app,
    stopping: () => {
      stopping = true
      // an idle connection sends no more answers to carry the header, so it is closed here;
      // one with a request under way closes after its answer
      app.server.closeIdleConnections()
    }
  }
}

function send (reply: FastifyReply, status: number, body: object): void {
  reply.code(status).header('content-type', 'application/json; charset=utf-8').send(JSON.stringify(body))
}
