import type { IncomingMessage } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { WebSocket, WebSocketServer, type ClientOptions } from 'ws'
import { createConnection } from '../connector.js'
import type { Authorization } from '../token/credential.js'
import { accessLine } from './access-log.js'
import { Attempt, type Transport } from './attempt.js'
import type { ProxyContext, UpstreamConnection } from './context.js'
import { ClientGoneError, InvalidStatusError } from '../errors.js'
import { countHeader, forwardedHeaders, schemeOf } from './headers.js'
import { sendError } from './replies.js'
import { takeConnection } from './upgrade.js'
import type { OpenSession, RouteSessions, TableEntry } from './route-table.js'
import type { UpstreamTarget } from './target.js'
import { relay } from './websocket-relay.js'

/** RFC 7230 token characters: what a subprotocol name may be made of. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
/** A Sec-WebSocket-Key is 16 random bytes in base64. */
const KEY = /^[A-Za-z0-9+/]{22}==$/

/**
 * Why a handshake cannot be forwarded faithfully, or undefined:
 * decided before anything reaches the upstream.
 */
export function handshakeProblem (req: IncomingMessage): string | undefined {
  if (req.method !== 'GET') return 'a method other than GET'
  if ((req.url ?? '').includes('#')) return 'a fragment in the target'
  if ((req.headers.upgrade ?? '').toLowerCase() !== 'websocket') return 'not a WebSocket upgrade'
  if (req.headers['sec-websocket-version'] !== '13') return 'an unknown Sec-WebSocket-Version'
  // a handshake has no body: one would be taken for the first WebSocket frames
  if ((req.headers['content-length'] !== undefined && req.headers['content-length'] !== '0') || req.headers['transfer-encoding'] !== undefined) return 'a body'
  if (!KEY.test(req.headers['sec-websocket-key'] ?? '')) return 'a missing or malformed Sec-WebSocket-Key'
  if (countHeader(req.rawHeaders, 'sec-websocket-protocol') > 1) return 'a duplicated Sec-WebSocket-Protocol'
  const protocol = req.headers['sec-websocket-protocol']
  if (protocol !== undefined) {
    const names = protocol.split(',').map((p) => p.trim())
    if (names.some((n) => !TOKEN.test(n)) || new Set(names).size !== names.length) return 'a malformed Sec-WebSocket-Protocol'
  }
  return undefined
}

/**
 * A listener's WebSocket sessions: each handshake goes upstream with the
 * route's authorization and the client's subprotocols; the client's
 * handshake completes only after the upstream's, with the subprotocol the
 * upstream chose, so that an upstream refusal reaches the client as its
 * status. Messages, pings and close codes are then relayed
 * (websocket-relay.ts). Until then the handshake is a Fastify request like
 * any other: admitted, guarded, authorized, answered by a Fastify reply.
 */
export class WebSocketSessions {
  /** every handshake under way and session open, closed on shutdown */
  readonly #live = new Set<OpenSession>()
  #closing = false

  /** Forwards one handshake that reached a route; its session is counted among the route's too. */
  handshake (request: FastifyRequest, reply: FastifyReply, route: TableEntry, target: UpstreamTarget): void {
    const o = route.context
    const problem = handshakeProblem(request.raw)
    if (problem !== undefined) {
      o.log.debug({ requestId: request.id, problem }, 'websocket handshake refused')
      return sendError(reply, 'bad_request')
    }
    if (this.#closing) return sendError(reply, 'overloaded', { close: true })
    new Handshake(request, reply, o, this.#live, route.sessions, target).start()
  }

  /** Closes every open WebSocket with 1001 (going away), and every handshake still under way. */
  close (): void {
    this.#closing = true
    for (const session of this.#live) session.close('proxy shutting down')
  }
}

/**
 * One handshake through a route to its upstream, its policy the attempt's
 * (attempt.ts: deadline, departure, a place, the authorization, the 401),
 * a WebSocket client the transport: the client's handshake completes only
 * after the upstream's, with the subprotocol the upstream chose.
 */
class Handshake implements Transport {
  readonly #request: FastifyRequest
  readonly #reply: FastifyReply
  readonly #o: ProxyContext
  /** the listener's sessions */
  readonly #live: Set<OpenSession>
  /** the route's sessions */
  readonly #sessions: RouteSessions
  readonly #target: UpstreamTarget
  readonly #attempt: Attempt
  /** the latest upstream handshake */
  #upstream: WebSocket | undefined
  /** on shutdown, a handshake still under way is cut with its connection */
  readonly #cut = { close: () => this.#request.raw.socket.destroy() }

  constructor (request: FastifyRequest, reply: FastifyReply, o: ProxyContext, live: Set<OpenSession>, sessions: RouteSessions, target: UpstreamTarget) {
    this.#target = target
    this.#request = request
    this.#reply = reply
    this.#o = o
    this.#live = live
    this.#sessions = sessions
    this.#attempt = new Attempt(request, reply, o, this, { replayable: true, failedAs: 'websocket upstream failed', path: target.path })
  }

  start (): void {
    this.#live.add(this.#cut)
    this.#attempt.start()
  }

  send (authorization: Authorization, connection: UpstreamConnection, trace: Readonly<Record<string, string>> | undefined): void {
    const route = this.#o.route
    const req = this.#request.raw
    const { path, query } = this.#target
    const protocols = (req.headers['sec-websocket-protocol'] ?? '').split(',').map((p) => p.trim()).filter(Boolean)
    const headers = forwardedHeaders(req.rawHeaders, {
      authorization: authorization.header,
      // a handshake's proof names the URL with http or https (RFC 9449 §4.2)
      dpop: authorization.prove?.('GET', route.origin + path),
      host: undefined,
      requestId: this.#request.id,
      clientIp: req.socket.remoteAddress,
      withoutBody: true,
      handshake: true,
      proto: schemeOf(req.socket),
      trace
    })
    const up = this.#upstream = new WebSocket(route.origin.replace(/^http/, 'ws') + path + query, protocols, {
      headers: headers as Record<string, string>,
      perMessageDeflate: false,
      followRedirects: false,
      maxPayload: route.websocketMaxMessageBytes,
      // the route's own connections: its egress proxy, NO_PROXY and TLS as its
      // HTTP requests have them (ws types only the synchronous form Node also takes)
      createConnection: createConnection(connection.connect, route.origin) as unknown as ClientOptions['createConnection']
    })
    this.#attempt.underway(() => up.terminate())
    up.once('unexpected-response', (_upReq, res) => {
      res.destroy()
      up.terminate()
      const status = res.statusCode ?? 0
      if (this.#attempt.over || this.#attempt.answered(status, res.headers['www-authenticate'], res.headers['dpop-nonce']) === 'replayed') return
      if (status < 200 || status > 599) return this.#failed(new InvalidStatusError(status))
      // the upstream refused the upgrade: the client gets its status
      this.#settle()
      this.#reply.code(status).header('x-request-id', this.#request.id).header('content-length', '0').send()
    })
    up.once('error', (err) => {
      // ws reports a failed handshake in state CLOSING: whatever the state,
      // a client still waiting gets an answer (from the latest handshake only)
      if (up === this.#upstream) this.#failed(err)
    })
    // the switch is an answer too: a DPoP-Nonce sent with it is the one the next proof carries
    up.once('upgrade', (res) => {
      this.#attempt.answered(101, res.headers['www-authenticate'], res.headers['dpop-nonce'])
    })
    up.once('open', () => this.#opened(up))
  }

  /** The upstream switched: the client's handshake is completed with the subprotocol the upstream chose. */
  #opened (up: WebSocket): void {
    if (this.#attempt.over) return void up.terminate()
    const connection = takeConnection(this.#request.raw)
    // the client went while the upstream switched
    if (connection === undefined) return this.#failed(new ClientGoneError())
    this.#settle()
    // the request is done as a request: a session from now on
    this.#reply.hijack()
    this.#request.sidecarTrace?.end(101)
    this.#o.admission.leave(this.#request)
    // nothing is read from the upstream until the client can take it
    up.pause()
    const { socket, head } = connection
    const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: this.#o.route.websocketMaxMessageBytes, handleProtocols: () => up.protocol === '' ? false : up.protocol })
    const session = { close: (reason: string) => downstream === undefined ? socket.destroy() : downstream.close(1001, reason) }
    let downstream: WebSocket | undefined
    this.#live.add(session)
    // one access line per session, when it ends
    socket.once('close', () => {
      this.#live.delete(session)
      this.#sessions.delete(session)
      if (downstream === undefined) up.terminate()
      this.#o.events.emit('response', accessLine(this.#request, downstream === undefined ? 499 : 101, performance.now() - this.#request.sidecarStarted, this.#o.route.name))
    })
    wss.handleUpgrade(this.#request.raw, socket, head, (ws) => {
      downstream = ws
      relay(ws, up)
      up.resume()
      if (up.readyState !== WebSocket.OPEN) ws.close(1014, 'upstream closed abnormally')
      // counted by its route once open, so that a route removed meanwhile ends it with a close frame
      else this.#sessions.add(session)
    })
  }

  /** The handshake ends without a switch: the sidecar's answer, unless the client has gone. */
  #failed (err: unknown): void {
    if (this.#attempt.over) return
    this.#live.delete(this.#cut)
    this.#upstream?.terminate()
    this.#attempt.failed(err)
  }

  /** The handshake is answered: its place given back, its watch gone. */
  #settle (): void {
    this.#live.delete(this.#cut)
    this.#attempt.finish()
  }
}
