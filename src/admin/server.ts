import { createServer, type Server } from 'node:http'
import type { Registry } from 'prom-client'

export interface AdminOptions {
  registry: Registry
  /** undefined when ready, else why not */
  notReadyReason(): string | undefined
}

/**
 * Liveness, readiness and metrics (SPEC §5) on their own port, as a bare
 * node:http server: three fixed routes need no framework on the start-up path.
 */
export function createAdminServer (opts: AdminOptions): Server {
  return createServer((req, res) => {
    const path = (req.url ?? '/').split('?', 1)[0]
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, { error: 'method_not_allowed' })
    switch (path) {
      case '/healthz':
        return send(res, 200, { status: 'ok' })
      case '/readyz': {
        const reason = opts.notReadyReason()
        return reason === undefined ? send(res, 200, { status: 'ready' }) : send(res, 503, { status: 'not_ready', reason })
      }
      case '/metrics':
        opts.registry.metrics().then((text) => {
          res.writeHead(200, { 'content-type': opts.registry.contentType })
          res.end(req.method === 'HEAD' ? undefined : text)
        }, () => send(res, 500, { error: 'metrics_failed' }))
        return
      default:
        return send(res, 404, { error: 'not_found' })
    }
  })
}

function send (res: import('node:http').ServerResponse, status: number, body: object): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}
