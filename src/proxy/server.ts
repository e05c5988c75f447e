import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { createForwarder, type ForwardOptions } from './forward.js'
import { WebSocketProxy } from './websocket.js'

export interface ProxyServer {
  server: Server
  /** Closes the open WebSockets (the HTTP side drains through server.close()). */
  closeWebSockets(): void
}

/**
 * The proxy's listener: a bare node:http server whose every request goes to
 * the forwarder, and whose upgrades go to the WebSocket proxy. No framework
 * sits on this path: see docs/performance.md for the measurements.
 */
export function createProxyServer (opts: ForwardOptions): ProxyServer {
  const forward = createForwarder(opts)
  const server = createServer({
    // A long upload is not cut by Node's whole-request timeout; stalled
    // headers still are (headersTimeout).
    requestTimeout: 0
  }, forward as (req: IncomingMessage, res: ServerResponse) => void)
  const ws = new WebSocketProxy(opts)
  server.on('upgrade', ws.upgrade)
  return { server, closeWebSockets: () => ws.close() }
}
