import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { forward } from './forward.js'
import { authorize } from './authorize.js'
import { sendError } from './replies.js'
import { isUpgrade } from './upgrade.js'
import type { Tracing } from '../tracing/tracing.js'

export interface ServeOptions {
  /** every method forwarded */
  methods: string[]
  tracing: Tracing
  /** what answers a request no route took (the forward proxy's); 400 by default */
  unrouted?: (request: FastifyRequest, reply: FastifyReply) => void
}

/**
 * A listener's one Fastify route: every method and path, served by the
 * route its table gave the request on arrival (server.ts). The listener's
 * hooks (the access log, admission, the guard) hold for all of them, and
 * its admission and WebSocket sessions serve them. Requests pass authorize
 * (the route's credential), then forward (HTTP) or the WebSocket handshake.
 */
export async function serveRoutes (app: FastifyInstance, o: ServeOptions): Promise<void> {
  // Bodies are streamed as they come, whatever their type.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_request, payload, done) => { done(null, payload) })
  // before authorize: a request that waits for a token has its span to link from
  o.tracing.instrumentRoute(app, (request) => request.sidecarRoute?.context.route.name)
  await app.register(authorize)
  const websockets = app.sidecarWebSockets
  const unrouted = o.unrouted ?? ((_request, reply) => { sendError(reply, 'bad_request') })
  const handler = (request: FastifyRequest, reply: FastifyReply): void => {
    const entry = request.sidecarRoute
    const target = request.sidecarTarget
    if (entry === undefined || target === undefined) return unrouted(request, reply)
    if (isUpgrade(request.raw)) websockets.handshake(request, reply, entry, target)
    else forward(request, reply, entry.context, target)
  }
  app.route({ method: o.methods, url: '/', handler })
  app.route({ method: o.methods, url: '/*', handler })
}
