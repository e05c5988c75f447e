import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import { TLSSocket } from 'node:tls'
import type { Logger } from '../logger.js'
import type { ForwardCa } from './ca.js'
import type { Destination } from './destinations.js'
import { ESTABLISHED, type ConnectRefusal } from './tunnel.js'

/** A connection the proxy terminated: for which destination, and whether its TLS named another host. */
export interface Interception {
  destination: Destination
  misdirected: boolean
}

export interface InterceptionOptions {
  /** the CA of the intercepted https origins; undefined when no route is https */
  ca: ForwardCa | undefined
  /** how long a client may take to complete TLS, as for its request headers */
  headersTimeoutMs: number
  log: Logger
}

/**
 * A CONNECT to a route's https origin, its TLS terminated here with a
 * certificate of the forward CA for exactly that host. `secured` gets the
 * TLS socket once the handshake is done, to hand it to the HTTP server; the
 * connection counts among the requests in progress until then.
 */
export function intercept (o: InterceptionOptions, socket: Duplex, head: Buffer, destination: Destination, release: () => void, refuse: ConnectRefusal, answered: () => void, secured: (tls: TLSSocket, interception: Interception) => void): void {
  const ca = o.ca
  if (ca === undefined || ca.unusable() !== undefined) {
    release()
    return refuse('certificate_unavailable', destination)
  }
  ca.contextFor(destination.hostname).then((secureContext) => {
    if (socket.destroyed) return release()
    socket.write(ESTABLISHED)
    answered()
    if (head.length > 0) socket.unshift(head)
    const tls = new TLSSocket(socket as Socket, { isServer: true, secureContext, ALPNProtocols: ['http/1.1'] })
    // a client that opens the tunnel and never completes TLS is closed like one whose headers never come
    const silent = setTimeout(() => tls.destroy(), o.headersTimeoutMs)
    tls.on('error', () => tls.destroy())
    // The client's end of its TLS ends the connection: left half-open (as the
    // HTTP server keeps its sockets), it would stay until a timeout.
    tls.once('end', () => tls.destroy())
    tls.once('close', () => {
      clearTimeout(silent)
      release()
      socket.destroy()
    })
    tls.once('secure', () => {
      clearTimeout(silent)
      release()
      const sni = (tls as TLSSocket & { servername?: string | false }).servername
      secured(tls, { destination, misdirected: typeof sni === 'string' && sni.toLowerCase() !== destination.hostname })
    })
  }, (err: Error) => {
    release()
    o.log.warn({ destination: destination.origin, reason: err.message }, 'forward proxy: no certificate could be made for the host')
    refuse('certificate_unavailable', destination)
  })
}
