// The benchmark's upstream: a plain node:http server on 127.0.0.1 (HTTPS
// with TLS_CERT and TLS_KEY files, asking for a client certificate signed by
// TLS_CA when that is set). GET answers a small JSON body; POST counts the
// body; GET /bytes/N streams N bytes.
import { readFileSync } from 'node:fs'
import { createServer as createHttpServer } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'

const body = Buffer.from('{"ok":true,"service":"bench-upstream"}')
const chunk = Buffer.alloc(1024 * 1024, 120)

const tls = process.env.TLS_CERT === undefined
  ? undefined
  : { cert: readFileSync(process.env.TLS_CERT), key: readFileSync(process.env.TLS_KEY), ...(process.env.TLS_CA !== undefined && { ca: readFileSync(process.env.TLS_CA), requestCert: true, rejectUnauthorized: false }) }
const createServer = (handler) => tls === undefined ? createHttpServer(handler) : createHttpsServer(tls, handler)

const server = createServer((req, res) => {
  const m = /^\/bytes\/(\d+)/.exec(req.url)
  if (m !== null) {
    const total = Number(m[1])
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': total })
    let sent = 0
    const pump = () => {
      while (sent < total) {
        const n = Math.min(chunk.length, total - sent)
        sent += n
        if (!res.write(n === chunk.length ? chunk : chunk.subarray(0, n))) return res.once('drain', pump)
      }
      res.end()
    }
    return pump()
  }
  if (req.method === 'POST' || req.method === 'PUT') {
    let n = 0
    req.on('data', (c) => { n += c.length })
    req.on('end', () => res.end(JSON.stringify({ received: n })))
    return
  }
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length })
  res.end(body)
})
// Longer than every proxy's pool keep-alive, as a real API's would be.
server.keepAliveTimeout = 65_000
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + '\n')
})
process.on('SIGTERM', () => process.exit(0))
