import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { ProxyContext } from './context.js'
import { forward } from './forward.js'
import { authorize } from './authorize.js'
import { sendError } from './replies.js'
import { upstreamTarget } from './target.js'
import { isUpgrade } from './upgrade.js'
import type { WebSocketEgress } from '../dispatcher.js'
import type { Tracing } from '../tracing/tracing.js'

export interface RouteOptions {
  /** the route's own parts; the listener's (admission, WebSocket sessions) are the instance's it is registered on */
  context: Omit<ProxyContext, 'admission'>
  /** every method forwarded */
  methods: string[]
  egress: WebSocketEgress
  /** Fastify's route constraints: on the forward proxy's listener, the route's origin */
  constraints?: Record<string, string>
  tracing: Tracing
}

/**
 * One route: every method and path under its prefix goes to its upstream
 * with its credential. Registered once per route, with the route's prefix
 * (several upstreams are the same plugin N times); the listener's hooks
 * (the access log, admission, the guard) hold for all of them, and its
 * admission and WebSocket sessions serve them. Requests pass authorize (the
 * credential), then forward (HTTP) or the WebSocket handshake.
 */
export async function proxyRoute (app: FastifyInstance, o: RouteOptions): Promise<void> {
  // Bodies are streamed as they come, whatever their type.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_request, payload, done) => { done(null, payload) })
  // before authorize: a request that waits for a token has its span to link from
  o.tracing.instrumentRoute(app, o.context.route.name)
  await app.register(authorize, { credential: o.context.credential })
  const context: ProxyContext = { ...o.context, admission: app.sidecarAdmission }
  const websockets = app.sidecarWebSockets
  const handler = (request: FastifyRequest, reply: FastifyReply): void => {
    const target = upstreamTarget(request.raw.url ?? '/', context.route)
    if (target === undefined) return sendError(reply, 'bad_request')
    if (isUpgrade(request.raw)) websockets.handshake(request, reply, context, o.egress, target)
    else forward(request, reply, context, target)
  }
  const config = { sidecarRoute: context.route.name }
  const constraints = o.constraints ?? {}
  app.route({ method: o.methods, url: '/', handler, config, constraints })
  app.route({ method: o.methods, url: '/*', handler, config, constraints })
}
