import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import { isConfined } from './confine.js'
import { hasAmbiguousHeaders } from './headers.js'
import { sendError } from './replies.js'

/** TRACE would echo the injected Authorization header back to the client; CONNECT never reaches a route. */
export const REFUSED_METHODS: ReadonlySet<string> = new Set(['TRACE', 'CONNECT'])

/**
 * Refuses, before anything is forwarded or a token is asked for, what could
 * take the token elsewhere or be read otherwise by the servers behind the
 * upstream: targets outside the route's BASE_URL (src/proxy/confine.ts),
 * TRACE, and ambiguous headers; WebSocket handshakes alike.
 */
export const guard = fp(async function guard (app: FastifyInstance) {
  app.addHook('onRequest', (request, reply, done) => {
    const raw = request.raw
    if (!isConfined(raw.url ?? '')) return sendError(reply, 'bad_request')
    if (REFUSED_METHODS.has(raw.method ?? '')) return sendError(reply, 'bad_request', { status: 405 })
    if (hasAmbiguousHeaders(raw.rawHeaders, raw.headers.connection)) return sendError(reply, 'bad_request')
    done()
  })
})
