import type { EventEmitter } from 'node:events'
import { connect as netConnect, type Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import type { ForwardSettings } from '../config/types.js'
import { ForbiddenAddressError, type ErrorCode } from '../errors.js'
import type { Logger } from '../logger.js'
import type { ProxyEvents } from '../proxy/context.js'
import { upstreamFailure } from '../proxy/failures.js'
import { UNROUTED } from '../proxy/request-budget.js'
import { checkedAddress, type Destination, type Lookup } from './destinations.js'

/** The answer to a CONNECT that is taken: what the client sends next goes through. */
export const ESTABLISHED = 'HTTP/1.1 200 Connection Established\r\n\r\n'

/** Answers a CONNECT on its socket with one of the sidecar's errors, and logs it. */
export type ConnectRefusal = (code: ErrorCode, destination?: Destination) => void

/** What a blind tunnel needs beyond the connection it carries. */
export interface TunnelOptions {
  /** UPSTREAM_TIMEOUT_MS to connect, UPSTREAM_IDLE_TIMEOUT_MS of silence before it is closed */
  upstream: { timeoutMs: number, idleTimeoutMs: number }
  events: EventEmitter<ProxyEvents>
  log: Logger
  /** the sidecar's own ports, which an allowed name never reaches on this host */
  ownPorts: () => readonly number[]
  lookup: Lookup | undefined
  /** the connections open, so that shutdown can cut them */
  tunnels: Set<Socket>
}

/**
 * A blind tunnel to an allowed destination, closed after
 * UPSTREAM_IDLE_TIMEOUT_MS of silence both ways. A destination that cannot
 * be reached (refused, unresolvable, no connection in UPSTREAM_TIMEOUT_MS)
 * is answered 502 as a request would be, logged, and counted as a
 * tunnelled connection with an upstream error; a name that resolves to an
 * address it may not reach is refused before anything is dialled.
 */
export function tunnel (o: TunnelOptions, socket: Duplex, head: Buffer, destination: Destination, pattern: ForwardSettings['allow'][number], requestId: string, release: () => void, refuse: ConnectRefusal, answered: (status: number) => void): void {
  const { timeoutMs, idleTimeoutMs } = o.upstream
  const events = o.events
  const fail = (err: Error & { code?: string }): void => {
    release()
    const failure = upstreamFailure(err)
    o.log.warn({ requestId, destination: destination.origin, upstreamError: failure.code }, 'forward proxy: tunnel failed')
    events.emit('forward_connection', 'tunnelled')
    events.emit('upstream_error', { route: UNROUTED, ...failure })
    refuse(failure.reason === 'timeout' ? 'upstream_timeout' : 'upstream_unreachable', destination)
  }
  checkedAddress(destination, pattern, o.ownPorts, o.lookup).then((address) => {
    if (socket.destroyed) return release()
    const upstream = netConnect({ host: address, port: destination.port })
    o.tunnels.add(upstream)
    // set once the destination took the connection; until then a failure is answered on the client's socket
    let established = false
    let failed = false
    const connecting = setTimeout(() => upstream.destroy(Object.assign(new Error('connect timeout'), { code: 'ETIMEDOUT' })), timeoutMs)
    upstream.once('error', (err) => {
      clearTimeout(connecting)
      if (established || socket.destroyed) return void socket.destroy()
      failed = true
      fail(err)
    })
    upstream.once('close', () => {
      clearTimeout(connecting)
      o.tunnels.delete(upstream)
      release()
      // a failed tunnel's answer closes the client's socket once it is written
      if (!failed) socket.destroy()
    })
    socket.once('close', () => upstream.destroy())
    upstream.once('connect', () => {
      clearTimeout(connecting)
      established = true
      socket.write(ESTABLISHED)
      answered(200)
      events.emit('forward_connection', 'tunnelled')
      if (head.length > 0) upstream.write(head)
      // Activity either way keeps the client's side busy: one timer covers both.
      ;(socket as Socket).setTimeout(idleTimeoutMs, () => socket.destroy())
      socket.pipe(upstream)
      upstream.pipe(socket)
    })
  }, (err: Error & { code?: string }) => {
    if (!(err instanceof ForbiddenAddressError)) return fail(err)
    release()
    refuse('destination_not_allowed', destination)
  })
}
