import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { ProxyContext } from './context.js'
import { forward } from './forward.js'
import { guard } from './guard.js'
import { authorize } from './authorize.js'
import { sendError } from './replies.js'
import { upstreamTarget } from './target.js'
import { isUpgrade } from './upgrade.js'
import type { WebSocketEgress, WebSocketSessions } from './websocket.js'

export interface RouteOptions {
  context: ProxyContext
  /** every method forwarded */
  methods: string[]
  websockets: WebSocketSessions
  egress: WebSocketEgress
}

/**
 * One route: every method and path under its prefix goes to its upstream
 * with its credential. Registered once per route, with the route's prefix
 * (several upstreams are the same plugin N times); the listener's hooks
 * (admission, the access log) hold for all of them. Requests pass, in order:
 * the guard (what may not be forwarded), authorize (the credential), then
 * forward (HTTP) or the WebSocket handshake.
 */
export async function proxyRoute (app: FastifyInstance, o: RouteOptions): Promise<void> {
  // Bodies are streamed as they come, whatever their type.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_request, payload, done) => { done(null, payload) })
  await app.register(guard)
  await app.register(authorize, { credential: o.context.credential })
  const handler = (request: FastifyRequest, reply: FastifyReply): void => {
    const target = upstreamTarget(request.raw.url ?? '/', o.context.route)
    if (target === undefined) return sendError(reply, 'bad_request')
    if (isUpgrade(request.raw)) o.websockets.handshake(request, reply, o.context, o.egress, target)
    else forward(request, reply, o.context, target)
  }
  const config = { sidecarRoute: o.context.route.name }
  app.route({ method: o.methods, url: '/', handler, config })
  app.route({ method: o.methods, url: '/*', handler, config })
}
