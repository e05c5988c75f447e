import { readFileSync } from 'node:fs'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'

/** Why a connection was closed to keep a listener within its bound: an idle one made way for a new one, or the new one found every place busy. */
export type ShedReason = 'idle' | 'full'

/** A connection's requests in progress; Infinity once it is a WebSocket session or a tunnel. */
interface Tracked {
  busy: number
}

/**
 * At most `max` client connections open on one listener. A new connection
 * past it takes the place of the oldest idle one (no request in progress:
 * kept alive between requests, or never having sent one), as nginx and
 * Envoy shed idle connections; when every one is busy, the new one is
 * closed at once. Silent connections can fill a listener, then, but not the
 * process's file descriptors: the other listeners, the upstream connections
 * and the token renewal keep theirs. Connections handed to the server by
 * the forward proxy (an intercepted TLS connection) count like accepted ones.
 */
export function boundConnections (server: Server, max: number, onShed: (reason: ShedReason) => void): void {
  const open = new Map<Socket, Tracked>()
  server.on('connection', (socket: Socket) => {
    // a tunnelled connection handed back to the server (plain HTTP in a CONNECT) has its place already
    const known = open.get(socket)
    if (known !== undefined) {
      known.busy = 0
      return
    }
    if (open.size >= max) {
      const idle = oldestIdle(open)
      if (idle === undefined) {
        onShed('full')
        socket.destroy()
        return
      }
      open.delete(idle)
      idle.destroy()
      onShed('idle')
    }
    open.set(socket, { busy: 0 })
    socket.once('close', () => open.delete(socket))
  })
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const tracked = open.get(req.socket)
    if (tracked === undefined) return
    tracked.busy++
    res.once('close', () => { tracked.busy-- })
  })
  const taken = (req: IncomingMessage): void => {
    const tracked = open.get(req.socket)
    if (tracked !== undefined) tracked.busy = Infinity
  }
  // only where the server takes them: an 'upgrade' listener changes how Node answers an upgrade request
  for (const event of ['upgrade', 'connect']) if (server.listenerCount(event) > 0) server.on(event, taken)
}

function oldestIdle (open: Map<Socket, Tracked>): Socket | undefined {
  for (const [socket, { busy }] of open) if (busy === 0) return socket
  return undefined
}

/** Descriptors kept for what is not a client connection: the auth server, files, the log, the tracing exporter. */
export const RESERVED_DESCRIPTORS = 64

/**
 * The process's limit of open files (the soft RLIMIT_NOFILE, `ulimit -n`),
 * where the system tells it (Linux's /proc); undefined elsewhere.
 */
export function descriptorLimit (): number | undefined {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8').split('\n').find((l) => l.startsWith('Max open files'))
    const soft = line?.slice('Max open files'.length).trim().split(/\s+/)[0]
    return soft === undefined || soft === 'unlimited' ? undefined : Number(soft)
  } catch {
    return undefined
  }
}

/**
 * The connection bound of each proxy listener and of the admin listener,
 * within the descriptor limit: what the upstream pools and the reserve
 * take is kept back, and each proxy connection is counted twice (a tunnel
 * or a WebSocket session holds one upstream). Returns the bounds asked for
 * when they fit, else lower ones (the admin's kept first), and the limit
 * the bounds asked for need.
 */
export function fitConnections (o: { proxy: number, admin: number, proxyListeners: number, upstreamConnections: number, limit: number | undefined }): { proxy: number, admin: number, needed: number } {
  const needed = RESERVED_DESCRIPTORS + o.upstreamConnections + o.admin + 2 * o.proxyListeners * o.proxy
  if (o.limit === undefined) return { proxy: o.proxy, admin: o.admin, needed }
  const available = o.limit - RESERVED_DESCRIPTORS - o.upstreamConnections
  const admin = Math.max(1, Math.min(o.admin, Math.floor(available / 8)))
  const proxy = Math.max(1, Math.min(o.proxy, Math.floor((available - admin) / (2 * o.proxyListeners))))
  return { proxy, admin, needed }
}
