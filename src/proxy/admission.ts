import type { Socket } from 'node:net'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { sendError } from './replies.js'
import type { RequestBudget } from './request-budget.js'

/**
 * Unanswered requests one connection may have; the next one is answered 503
 * with `Connection: close`, and so is every request read after it.
 */
export const PIPELINE_DEPTH = 16

declare module 'fastify' {
  interface FastifyRequest {
    /** counted among its connection's unanswered requests */
    sidecarOnLine: boolean
    /** counted among the requests in progress */
    sidecarCounted: boolean
    /** the route whose share it was counted in, if any */
    sidecarCountedFor: string | undefined
  }
}

interface Connection {
  unanswered: number
  /** what to do when the client's connection closes: abort the exchanges on it */
  onClose: Set<() => void>
}

/**
 * Bounds the work a client can make on one listener: the requests in
 * progress within the sidecar's budget (all listeners', and the route's
 * share of it), and at most PIPELINE_DEPTH unanswered requests on one
 * connection. Beyond either, the request is answered at once, `503
 * {"error":"overloaded"}`, and never forwarded. WebSocket handshakes are
 * requests like any other until they are answered.
 *
 * A connection that pipelines further ahead than PIPELINE_DEPTH is closed
 * after its earlier answers, as nginx and Envoy do. Its extra requests are
 * answered rather than left waiting: Node's HTTP server stops reading a
 * connection whose answers pile up unread, so a client that pipelines
 * thousands of requests and reads none makes the sidecar hold one read's
 * worth of them, not all of them.
 *
 * It also knows when a client has gone: HTTP/1.1 has no way to give up one
 * request but closing its connection, and a closed connection takes every
 * request on it.
 */
export class Admission {
  readonly #budget: RequestBudget
  readonly #connections = new WeakMap<Socket, Connection>()

  constructor (budget: RequestBudget) {
    this.#budget = budget
  }

  /** The listener's hooks. */
  readonly plugin = fp(async (app: FastifyInstance) => {
    app.decorateRequest('sidecarOnLine', false)
    app.decorateRequest('sidecarCounted', false)
    app.decorateRequest('sidecarCountedFor', undefined)
    app.addHook('onRequest', (request, reply, done) => {
      const connection = this.#connection(request.raw.socket)
      connection.unanswered++
      request.sidecarOnLine = true
      // Refused before it is counted: one flooding connection cannot take the
      // places of the others.
      if (connection.unanswered > PIPELINE_DEPTH) return sendError(reply, 'overloaded', { retryAfter: 1, close: true })
      const route = request.sidecarRoute?.context.route.name
      if (!this.#budget.take(route)) return sendError(reply, 'overloaded', { retryAfter: 1 })
      request.sidecarCounted = true
      request.sidecarCountedFor = route
      done()
    })
    // A pipelined request still queued when its client leaves gets no 'close'
    // of its own response: Fastify's onRequestAbort is what reports it.
    app.addHook('onResponse', (request, _reply, done) => { this.leave(request); done() })
    app.addHook('onRequestAbort', (request, done) => { this.leave(request); done() })
  }, { name: 'auth-sidecar-admission' })

  /** The request no longer counts: answered, abandoned, or a WebSocket handshake that became a session. */
  leave (request: FastifyRequest): void {
    if (request.sidecarInProgress) {
      request.sidecarInProgress = false
      request.sidecarRoute!.requests.leave()
    }
    if (request.sidecarCounted) {
      request.sidecarCounted = false
      this.#budget.give(request.sidecarCountedFor)
    }
    if (request.sidecarOnLine) {
      request.sidecarOnLine = false
      this.#connection(request.raw.socket).unanswered--
    }
  }

  /**
   * Counts a connection the forward proxy holds (a CONNECT being set up, a
   * tunnel) among the requests in progress. Returns what stops counting it,
   * or undefined when the sidecar is full.
   */
  hold (): (() => void) | undefined {
    if (!this.#budget.take(undefined)) return undefined
    let held = true
    return () => {
      if (!held) return
      held = false
      this.#budget.give(undefined)
    }
  }

  /** Calls `gone` should the client's connection close; returns what stops watching. */
  onDeparture (request: FastifyRequest, gone: () => void): () => void {
    if (request.raw.socket.destroyed) {
      queueMicrotask(gone)
      return () => {}
    }
    const { onClose } = this.#connection(request.raw.socket)
    onClose.add(gone)
    return () => onClose.delete(gone)
  }

  /**
   * Whether the request's client has left already, though its departure may
   * not be told yet: its connection is closed, or its end has been read (on
   * which Node's server gives up its requests, the close coming later).
   */
  static hasLeft (request: FastifyRequest): boolean {
    const socket = request.raw.socket as Socket | null
    return socket === null || socket.destroyed || socket.readableEnded
  }

  #connection (socket: Socket): Connection {
    let connection = this.#connections.get(socket)
    if (connection === undefined) {
      const created: Connection = { unanswered: 0, onClose: new Set() }
      socket.once('close', () => { for (const gone of created.onClose) gone() })
      this.#connections.set(socket, created)
      connection = created
    }
    return connection
  }
}
