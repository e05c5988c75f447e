import { ServerResponse, type IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import type { FastifyInstance } from 'fastify'

/** Bytes a client may send before its handshake is answered (it should send none). */
const MAX_EARLY_BYTES = 64 * 1024

/** An upgrade request's connection and what the client sent on it beyond the request. */
interface Upgrade {
  socket: Duplex
  res: ServerResponse
  early: Buffer[]
  keep: (chunk: Buffer) => void
  /** the WebSocket server has the connection */
  taken: boolean
}

const upgrades = new WeakMap<IncomingMessage, Upgrade>()

/**
 * Upgrade requests go through Fastify's router like any request (as
 * @fastify/websocket and @fastify/http-proxy route them): every hook holds
 * for them, and the answer before the switch to WebSocket is a Fastify
 * reply written to the connection. While the handshake waits, the
 * connection is read, so that a client that leaves is noticed at once (its
 * request is then aborted, as any other's), and what it sends meanwhile is
 * kept for the WebSocket server.
 */
export function routeUpgrades (app: FastifyInstance): void {
  app.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const res = new ServerResponse(req)
    res.assignSocket(socket as never)
    const entry: Upgrade = { socket, res, early: [head], keep: () => {}, taken: false }
    let earlyBytes = head.length
    entry.keep = (chunk) => {
      entry.early.push(chunk)
      earlyBytes += chunk.length
      if (earlyBytes > MAX_EARLY_BYTES) socket.destroy()
    }
    upgrades.set(req, entry)
    socket.on('error', () => socket.destroy())
    socket.on('data', entry.keep)
    socket.once('end', () => { if (!entry.taken) socket.destroy() })
    // A client gone before its answer: its request is aborted, as when an
    // ordinary request's connection closes (Fastify's onRequestAbort).
    socket.once('close', () => { if (!entry.taken && !res.writableFinished) req.destroy() })
    // After an answer other than the switch, the connection is done.
    res.once('finish', () => socket.destroy())
    app.routing(req, res)
  })
}

/** Whether a request came in as an upgrade. */
export function isUpgrade (req: IncomingMessage): boolean {
  return upgrades.has(req)
}

/**
 * Takes an upgrade's connection from the router, for the WebSocket server:
 * it is no longer read here, and what the client has sent is handed over.
 */
export function takeConnection (req: IncomingMessage): { socket: Duplex, head: Buffer } | undefined {
  const entry = upgrades.get(req)
  if (entry === undefined || entry.taken || entry.socket.destroyed) return undefined
  entry.taken = true
  entry.socket.off('data', entry.keep)
  entry.res.detachSocket(entry.socket as never)
  return { socket: entry.socket, head: Buffer.concat(entry.early) }
}
