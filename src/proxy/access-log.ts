import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'

export interface AccessLine {
  requestId: string
  method: string
  /** the request target without its query */
  path: string
  /** 499: the client left before the answer was complete */
  status: number
  durationMs: number
}

/** The request target without its query, as the access log shows it. */
export function pathOf (url: string): string {
  const q = url.indexOf('?')
  return q === -1 ? url : url.slice(0, q)
}

export function accessLine (request: FastifyRequest, status: number, ms: number): AccessLine {
  return {
    requestId: request.id,
    method: request.raw.method ?? '',
    path: pathOf(request.raw.url ?? ''),
    status,
    durationMs: Math.round(ms * 10) / 10
  }
}

declare module 'fastify' {
  interface FastifyRequest {
    /** performance.now() on arrival, for the line of an abandoned request */
    sidecarStarted: number
    /** the upstream failed after its answer had begun: the line says 502, not the client's 499 */
    sidecarUpstreamFailed: boolean
  }
}

/** One call per request, answered or abandoned: the access line and the request metrics. */
export const accessLog = fp<{ onResponse: (line: AccessLine) => void }>(async function accessLog (app: FastifyInstance, { onResponse }) {
  app.decorateRequest('sidecarStarted', 0)
  app.decorateRequest('sidecarUpstreamFailed', false)
  app.addHook('onRequest', (request, _reply, done) => {
    request.sidecarStarted = performance.now()
    done()
  })
  app.addHook('onResponse', (request, reply, done) => {
    // an answer written to a client already gone (an upload it gave up) is the client's 499
    const status = request.sidecarUpstreamFailed ? 502 : reply.raw.writableFinished ? reply.statusCode : 499
    onResponse(accessLine(request, status, reply.elapsedTime))
    done()
  })
  app.addHook('onRequestAbort', (request, done) => {
    onResponse(accessLine(request, request.sidecarUpstreamFailed ? 502 : 499, performance.now() - request.sidecarStarted))
    done()
  })
}, { name: 'auth-sidecar-access-log' })
