import type { Socket } from 'node:net'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { sendError } from './replies.js'

/**
 * Unanswered requests one connection may have; the next one is answered 503
 * with `Connection: close`, and so is every request read after it.
 */
export const PIPELINE_DEPTH = 16

export interface AdmissionOptions {
  /** most requests in progress at once (PROXY_MAX_REQUESTS) */
  maxRequests: number
}

declare module 'fastify' {
  interface FastifyRequest {
    /** counted among its connection's unanswered requests */
    sidecarOnLine: boolean
    /** counted among the requests in progress */
    sidecarCounted: boolean
  }
}

/**
 * Bounds the work a client can make: at most `maxRequests` requests in
 * progress over all connections, and at most PIPELINE_DEPTH unanswered
 * requests on one connection. Beyond either, the request is answered at
 * once, `503 {"error":"overloaded"}`, and never forwarded.
 *
 * A connection that pipelines further ahead than PIPELINE_DEPTH is closed
 * after its earlier answers, as nginx and Envoy do. Its extra requests are
 * answered rather than left waiting: Node's HTTP server stops reading a
 * connection whose answers pile up unread, so a client that pipelines
 * thousands of requests and reads none makes the sidecar hold one read's
 * worth of them, not all of them.
 */
export const admission = fp<AdmissionOptions>(async function admission (app: FastifyInstance, o: AdmissionOptions) {
  let inProgress = 0
  const unanswered = new WeakMap<Socket, number>()

  app.decorateRequest('sidecarOnLine', false)
  app.decorateRequest('sidecarCounted', false)

  app.addHook('onRequest', (request, reply, done) => {
    const socket = request.raw.socket
    const onLine = (unanswered.get(socket) ?? 0) + 1
    unanswered.set(socket, onLine)
    request.sidecarOnLine = true
    // Refused before it is counted: one flooding connection cannot take the
    // places of the others.
    if (onLine > PIPELINE_DEPTH) return sendError(reply, 'overloaded', { retryAfter: 1, close: true })
    if (inProgress >= o.maxRequests) return sendError(reply, 'overloaded', { retryAfter: 1 })
    inProgress++
    request.sidecarCounted = true
    done()
  })

  // A pipelined request still queued when its client leaves gets no 'close'
  // of its own response: Fastify's onRequestAbort is what reports it.
  const release = (request: FastifyRequest, done: () => void): void => {
    if (request.sidecarCounted) {
      request.sidecarCounted = false
      inProgress--
    }
    if (request.sidecarOnLine) {
      request.sidecarOnLine = false
      const socket = request.raw.socket
      unanswered.set(socket, (unanswered.get(socket) ?? 1) - 1)
    }
    done()
  }
  app.addHook('onResponse', (request, _reply, done) => release(request, done))
  app.addHook('onRequestAbort', (request, done) => release(request, done))
}, { name: 'auth-sidecar-admission' })
