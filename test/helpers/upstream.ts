import { createHash } from 'node:crypto'
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import type { AddressInfo } from 'node:net'
import { presentedCertificate, type TokenServer } from '../../dev/token-server.js'

export interface Received {
  method: string
  url: string
  headers: IncomingHttpHeaders
  /** raw header pairs, to count repeated headers exactly */
  rawHeaders: string[]
  bodyBytes: number
  bodySha256: string
  body: string
  /** the token server's verdict on the Authorization header */
  tokenValid: boolean
  tokenReason?: string
  /** when the request arrived (ms since the epoch) */
  at: number
  /** set when the request body ended early (the proxy aborted it) */
  abortedAt?: number
  /** the client certificate it came with (HTTPS with a CA): its x5t#S256 and CN */
  certificate?: { x5t: string, subject: string }
}

/**
 * A fake upstream API that records exactly what it received and checks every
 * bearer token with the token server. Paths under /_ select a behaviour:
 *   /_status/N          answer status N
 *   /_slow/MS           wait MS before the response headers
 *   /_reset             destroy the connection without answering
 *   /_redirect          302 to another origin
 *   /_bytes/N           stream N bytes
 *   /_echo              stream the request body back
 *   /_verify            401 unless the token is valid (as a real API)
 *   /_scope             401 with a Bearer insufficient_scope challenge
 *   /_sse/N/GAP         N server-sent events, GAP ms apart, headers at once
 * everything else answers 200 with a JSON summary.
 */
export class FakeUpstream {
  readonly server: Server
  readonly received: Received[] = []
  /** requests being answered now, and the most at once so far */
  inFlight = 0
  maxInFlight = 0
  /** Authorization headers answered 401 whatever the path */
  readonly rejectTokens = new Set<string>()
  /** connections opened to it so far */
  connections = 0

  /**
   * `tls`: serve HTTPS; with `ca`, ask for a client certificate and take it
   * when that CA signed it (a certificate-bound token is then checked
   * against it).
   */
  constructor (readonly tokens?: TokenServer, tls?: { key: string, cert: string, ca?: string, requireCertificate?: boolean }) {
    const handler = (req: IncomingMessage, res: ServerResponse): void => {
      const hash = createHash('sha256')
      const kept: Buffer[] = []
      let bytes = 0
      const path = req.url ?? ''
      let m0: RegExpMatchArray | null
      const presented = presentedCertificate(req)
      const verdict = tokens?.verify(req.headers.authorization, presented?.x5t) ?? { ok: true as const }
      const record: Received = {
        ...(presented !== undefined && { certificate: presented }),
        method: req.method ?? '',
        url: path,
        headers: req.headers,
        rawHeaders: req.rawHeaders,
        bodyBytes: 0,
        bodySha256: '',
        body: '',
        tokenValid: verdict.ok,
        at: Date.now(),
        ...(!verdict.ok && { tokenReason: verdict.reason })
      }
      this.received.push(record)
      this.maxInFlight = Math.max(this.maxInFlight, ++this.inFlight)
      res.on('close', () => { this.inFlight-- })

      if (path.includes('/_echo')) {
        res.writeHead(200, { 'content-type': 'application/octet-stream' })
        req.pipe(res)
        return
      }
      req.on('data', (c: Buffer) => {
        bytes += c.length
        hash.update(c)
        if (bytes <= 65536) kept.push(c)
      })
      req.on('close', () => {
        if (!req.complete) record.abortedAt = Date.now()
        record.bodyBytes = bytes
      })
      if ((m0 = path.match(/\/_sse\/(\d+)\/(\d+)/)) !== null) {
        const [count, gap] = [Number(m0[1]), Number(m0[2])]
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
        res.flushHeaders()
        let sent = 0
        const timer = setInterval(() => {
          res.write(`data: event ${++sent}\n\n`)
          if (sent === count) { clearInterval(timer); res.end() }
        }, gap)
        res.on('close', () => clearInterval(timer))
        return
      }
      req.on('end', () => {
        record.bodyBytes = bytes
        record.bodySha256 = hash.digest('hex')
        record.body = Buffer.concat(kept).toString()
        const auth = req.headers.authorization
        if ((auth !== undefined && this.rejectTokens.has(auth)) || (path.includes('/_verify') && !verdict.ok)) {
          res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': 'Bearer error="invalid_token"' })
          res.end('{"error":"invalid_token"}')
          return
        }
        let m: RegExpMatchArray | null
        if (path.includes('/_scope')) {
          res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': 'Bearer error="insufficient_scope", scope="orders:write"' })
          res.end('{"error":"insufficient_scope"}')
        } else if ((m = path.match(/\/_status\/(\d+)/)) !== null) {
          res.writeHead(Number(m[1]), { 'content-type': 'text/plain', 'x-upstream': 'yes' })
          res.end(`status ${m[1]}`)
        } else if ((m = path.match(/\/_slow\/(\d+)/)) !== null) {
          // cleared when the peer goes, so that a test's process does not wait out a long delay
          const timer = setTimeout(() => { if (!res.destroyed) res.end('slow') }, Number(m[1]))
          res.on('close', () => clearTimeout(timer))
        } else if (path.includes('/_reset')) {
          req.socket.destroy()
        } else if (path.includes('/_redirect')) {
          res.writeHead(302, { location: 'http://127.0.0.2:1/elsewhere' })
          res.end()
        } else if ((m = path.match(/\/_bytes\/(\d+)/)) !== null) {
          const total = Number(m[1])
          res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': total })
          const chunk = Buffer.alloc(65536, 120)
          let sent = 0
          const pump = (): void => {
            while (sent < total) {
              const n = Math.min(chunk.length, total - sent)
              sent += n
              if (!res.write(n === chunk.length ? chunk : chunk.subarray(0, n))) {
                res.once('drain', pump)
                return
              }
            }
            res.end()
          }
          pump()
        } else {
          const text = JSON.stringify({ method: req.method, url: path, bodyBytes: bytes })
          res.writeHead(200, { 'content-type': 'application/json', 'x-upstream': 'yes', 'set-cookie': 'a=1' })
          res.end(text)
        }
      })
    }
    this.#scheme = tls === undefined ? 'http' : 'https'
    this.server = tls === undefined
      ? createServer(handler)
      : createHttpsServer({ key: tls.key, cert: tls.cert, ...(tls.ca !== undefined && { ca: tls.ca, requestCert: true, rejectUnauthorized: tls.requireCertificate === true }) }, handler)
  }

  readonly #scheme: 'http' | 'https'

  async listen (): Promise<string> {
    this.server.on(this.#scheme === 'https' ? 'secureConnection' : 'connection', () => { this.connections++ })
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve))
    return this.url
  }

  get url (): string {
    return `${this.#scheme}://127.0.0.1:${(this.server.address() as AddressInfo).port}`
  }

  async close (): Promise<void> {
    this.server.closeAllConnections()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }
}
