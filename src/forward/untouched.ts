import type { EventEmitter } from 'node:events'
import { isIP } from 'node:net'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { Agent, buildConnector, type Dispatcher } from 'undici'
import type { ForwardSettings } from '../config/types.js'
import { ForbiddenAddressError } from '../errors.js'
import type { Logger } from '../logger.js'
import type { Admission } from '../proxy/admission.js'
import type { ProxyEvents } from '../proxy/context.js'
import { upstreamFailure } from '../proxy/failures.js'
import { relayedResponseHeaders, untouchedHeaders } from '../proxy/headers.js'
import { sendError } from '../proxy/replies.js'
import { UNROUTED } from '../proxy/request-budget.js'
import { allowing, checkedAddress, type Destination, type Lookup } from './destinations.js'

/** UPSTREAM_TIMEOUT_MS to the answer's headers, UPSTREAM_IDLE_TIMEOUT_MS between its chunks. */
export interface UntouchedTimeouts {
  timeoutMs: number
  idleTimeoutMs: number
}

/**
 * The connections to the destinations FORWARD_PROXY_ALLOW lets through: an
 * undici Agent whose connector checks each address before it is dialled, so
 * that the address dialled is the one checked.
 */
export function allowedAgent (allow: ForwardSettings['allow'], timeouts: UntouchedTimeouts, ownPorts: () => readonly number[], lookup: Lookup | undefined): Agent {
  const connector = buildConnector({})
  return new Agent({
    headersTimeout: timeouts.timeoutMs,
    bodyTimeout: timeouts.idleTimeoutMs,
    connect: (options, callback) => {
      const hostname = options.hostname.startsWith('[') ? options.hostname.slice(1, -1) : options.hostname
      const port = options.port === '' ? (options.protocol === 'https:' ? 443 : 80) : Number(options.port)
      const pattern = allowing(allow, { hostname, port })
      if (pattern === undefined) return callback(new ForbiddenAddressError(), null)
      checkedAddress({ hostname, port }, pattern, ownPorts, lookup).then(
        (address) => connector({ ...options, hostname: address, ...(isIP(hostname) === 0 && { servername: hostname }) }, callback),
        (err: Error) => callback(err, null))
    }
  })
}

export interface UntouchedOptions {
  timeouts: UntouchedTimeouts
  admission: Admission
  events: EventEmitter<ProxyEvents>
  log: Logger
}

/**
 * Passes a request on as it came, without a credential, and relays the
 * answer. One to an allowed destination (`allowed`: it goes through
 * allowedAgent's connections) is counted once: refused when its name
 * resolves to an address it may not reach (nothing was sent), tunnelled
 * otherwise, answered or failed.
 */
export function passUntouched (o: UntouchedOptions, request: FastifyRequest, reply: FastifyReply, destination: Destination, path: string, dispatcher: Dispatcher, allowed: boolean): void {
  const raw = request.raw
  const controller = new AbortController()
  const stop = o.admission.onDeparture(request, () => controller.abort())
  const hasBody = raw.headers['content-length'] !== undefined || raw.headers['transfer-encoding'] !== undefined
  const { timeoutMs, idleTimeoutMs } = o.timeouts
  dispatcher.request({
    origin: destination.origin,
    path,
    method: raw.method as Dispatcher.HttpMethod,
    // the application's own Authorization goes only to a destination no route holds
    headers: untouchedHeaders(raw.rawHeaders, new URL(destination.origin).host, allowed),
    body: hasBody ? raw : null,
    signal: controller.signal,
    headersTimeout: timeoutMs,
    bodyTimeout: idleTimeoutMs
  }).then((answer) => {
    if (allowed) o.events.emit('forward_connection', 'tunnelled')
    answer.body.once('close', stop)
    reply.code(answer.statusCode).headers(relayedResponseHeaders(answer.headers, request.id))
    reply.send(answer.body)
  }, (err: Error & { code?: string }) => {
    stop()
    if (err instanceof ForbiddenAddressError) {
      o.events.emit('forward_connection', 'refused')
      if (!controller.signal.aborted) sendError(reply, 'destination_not_allowed')
      return
    }
    if (allowed) o.events.emit('forward_connection', 'tunnelled')
    if (controller.signal.aborted) return
    const failure = upstreamFailure(err)
    o.log.warn({ requestId: request.id, destination: destination.origin, upstreamError: failure.code }, 'forward proxy: destination failed')
    o.events.emit('upstream_error', { route: UNROUTED, ...failure })
    sendError(reply, failure.reason === 'timeout' ? 'upstream_timeout' : 'upstream_unreachable')
  })
}
