import { mkdtempSync, readFileSync } from 'node:fs'
import { createServer as createHttpServer, type IncomingHttpHeaders } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import { connect, createServer, type AddressInfo, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { checkServerIdentity, connect as tlsConnect, type TLSSocket } from 'node:tls'
import t from 'tap'
import { ProxyAgent, request } from 'undici'
import WebSocket, { WebSocketServer } from 'ws'
import { build, metric, rawRequest, statusOf, until, type Harness } from '../helpers/build.js'
import { TestCa } from '../helpers/certificates.js'

const dir = mkdtempSync(join(tmpdir(), 'forward-proxy-'))
// the upstream's CA, which the sidecar trusts; the forward proxy's, which the application trusts
const serverCa = TestCa.create(join(dir, 'server-ca'), 'upstream CA')
const serverCert = serverCa.issue('localhost', { cn: 'localhost', san: 'DNS:localhost,IP:127.0.0.1' })
const forwardCa = TestCa.create(join(dir, 'forward-ca'), 'auth-sidecar forward proxy CA')
const forwardCaPem = readFileSync(forwardCa.caFile, 'utf8')

/** A sidecar whose default route is an https upstream at `https://127.0.0.1:<port>/api`, with the forward proxy on. */
async function forwardSidecar (t: import('tap').Test, env: Record<string, string> = {}, headersTimeoutMs?: number): Promise<Harness & { forwardPort: number, upstreamOrigin: string }> {
  const h = await build(t, {
    UPSTREAM_TLS_CA_FILE: serverCa.caFile,
    FORWARD_PROXY_PORT: '0',
    FORWARD_PROXY_CA_CERT_FILE: forwardCa.caFile,
    FORWARD_PROXY_CA_KEY_FILE: join(forwardCa.dir, 'ca.key'),
    ...env
  }, {}, { upstreamTls: { key: serverCert.key, cert: serverCert.cert }, ...(headersTimeoutMs !== undefined && { headersTimeoutMs }) })
  return { ...h, forwardPort: h.forwardPort!, upstreamOrigin: h.upstream.url }
}

/** undici's ProxyAgent, as an application would use it: the proxy by its URL, the forward CA trusted. */
function agentFor (h: { forwardPort: number }): ProxyAgent {
  return new ProxyAgent({ uri: `http://127.0.0.1:${h.forwardPort}`, requestTls: { ca: forwardCaPem } })
}

/** A CONNECT to `authority` on the forward proxy; resolves with its answer's head and the socket. */
function connectThrough (port: number, authority: string): Promise<{ head: string, socket: Socket }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1')
    let got = ''
    socket.on('error', reject)
    socket.on('data', function onData (chunk: Buffer) {
      got += chunk.toString('latin1')
      const end = got.indexOf('\r\n\r\n')
      if (end === -1) return
      socket.off('data', onData)
      resolve({ head: got, socket })
    })
    socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`)
  })
}

/** TLS inside a CONNECT tunnel, with `servername` as SNI, trusting the forward CA. */
async function tlsThrough (port: number, authority: string, servername?: string): Promise<TLSSocket> {
  const { head, socket } = await connectThrough(port, authority)
  if (statusOf(head) !== 200) throw new Error(`CONNECT answered ${head}`)
  return await new Promise((resolve, reject) => {
    // the certificate checked against the CONNECT's host, whatever the SNI says
    const host = new URL(`https://${authority}`).hostname
    const tls = tlsConnect({ socket, host, ...(servername !== undefined && { servername }), ca: forwardCaPem, ALPNProtocols: ['http/1.1'], checkServerIdentity: (_name, cert) => checkServerIdentity(host, cert) }, () => resolve(tls))
    tls.on('error', reject)
  })
}

/** One HTTP/1.1 request written on `socket`, its whole answer read. */
function exchange (socket: Duplex, text: string): Promise<string> {
  return new Promise((resolve) => {
    let got = ''
    socket.on('data', (c: Buffer) => {
      got += c.toString()
      const m = /content-length: (\d+)/i.exec(got)
      const end = got.indexOf('\r\n\r\n')
      if (m !== null && end !== -1 && got.length - end - 4 >= Number(m[1])) resolve(got)
      if (end !== -1 && /transfer-encoding: chunked/i.test(got) && got.endsWith('0\r\n\r\n')) resolve(got)
    })
    socket.on('close', () => resolve(got))
    socket.write(text)
  })
}
type Duplex = import('node:stream').Duplex

/** A port on `host` that refuses connections: a server's, closed. */
async function refusingPort (host: string): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, host, resolve))
  const { port } = server.address() as AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return port
}

/** A plain HTTP server on `host` that keeps what it received and answers 200. */
async function recordingServer (t: import('tap').Test, host: string): Promise<{ origin: string, received: IncomingHttpHeaders[] }> {
  const received: IncomingHttpHeaders[] = []
  const server = createHttpServer((req, res) => {
    received.push(req.headers)
    res.end('reached')
  })
  await new Promise<void>((resolve) => server.listen(0, host, resolve))
  t.teardown(() => server.close())
  return { origin: `http://${host}:${(server.address() as AddressInfo).port}`, received }
}

/** The forward proxy's outcomes and its upstream errors, as /metrics has them. */
async function forwardCounts (adminUrl: string): Promise<Record<string, number>> {
  const counts: Record<string, number> = {}
  for (const outcome of ['intercepted', 'tunnelled', 'refused']) counts[outcome] = await metric(adminUrl, `auth_sidecar_forward_connections_total{outcome="${outcome}"}`)
  for (const reason of ['unreachable', 'timeout', 'reset']) counts[reason] = await metric(adminUrl, `auth_sidecar_upstream_errors_total{reason="${reason}",route="-"}`)
  return counts
}

t.test('a request for a URL under an https route\'s BASE_URL gets its token through the intercepted CONNECT', async (t) => {
  const h = await forwardSidecar(t)
  const agent = agentFor(h)
  t.teardown(async () => await agent.close())
  const answer = await request(`${h.upstreamOrigin}/api/hello?x=1`, { dispatcher: agent, headers: { authorization: 'Bearer the-applications-own' } })
  t.equal(answer.statusCode, 200, await answer.body.text())
  const got = h.upstream.received.at(-1)!
  t.equal(got.url, '/api/hello?x=1', 'the path and query as the application asked')
  t.ok(got.tokenValid, 'with the route\'s token')
  t.not(got.headers.authorization, 'Bearer the-applications-own', 'never the application\'s own Authorization')
  t.equal(got.headers['x-forwarded-proto'], 'https', 'the scheme the application spoke')

  const again = await request(`${h.upstreamOrigin}/api/again`, { dispatcher: agent })
  t.equal(again.statusCode, 200)
  await again.body.text()
  t.ok(await metric(h.adminUrl, 'auth_sidecar_forward_connections_total{outcome="intercepted"}') >= 1, 'counted as intercepted')
  const line = h.log.records().find((l) => l.msg === 'request' && l.path === '/api/again')
  t.match(line, { mode: 'forward', route: 'default', destination: h.upstreamOrigin, status: 200 }, 'its access line says forward, and which route')
})

t.test('the certificate shown is for exactly the CONNECT\'s host, signed by the forward CA, at most a day', async (t) => {
  const h = await forwardSidecar(t)
  const tls = await tlsThrough(h.forwardPort, new URL(h.upstreamOrigin).host)
  t.teardown(() => tls.destroy())
  const cert = tls.getPeerX509Certificate()!
  t.equal(cert.subjectAltName, 'IP Address:127.0.0.1')
  t.match(cert.issuer, /auth-sidecar forward proxy CA/)
  t.ok(new Date(cert.validTo).getTime() - Date.now() <= 24 * 3_600_000 + 60_000, 'valid a day at most')
  t.equal(tls.alpnProtocol, 'http/1.1')
  t.equal(cert.publicKey.asymmetricKeyDetails?.namedCurve, 'prime256v1', 'an ECDSA P-256 key')
})

t.test('a Host or an SNI other than the CONNECT target is 421, nothing forwarded', async (t) => {
  const h = await forwardSidecar(t)
  const authority = new URL(h.upstreamOrigin).host
  const before = h.upstream.received.length
  const tls = await tlsThrough(h.forwardPort, authority)
  const answer = await exchange(tls, 'GET /api/x HTTP/1.1\r\nHost: elsewhere.example\r\n\r\n')
  t.equal(statusOf(answer), 421, answer)
  t.match(answer, /"error":"misdirected_request"/)
  tls.destroy()
  t.equal(h.upstream.received.length, before, 'nothing reached the upstream')

  const right = await tlsThrough(h.forwardPort, authority)
  const ok = await exchange(right, `GET /api/x HTTP/1.1\r\nHost: ${authority}\r\nProxy-Authorization: Basic c2VjcmV0\r\n\r\n`)
  t.equal(statusOf(ok), 200, 'the same request naming the CONNECT\'s host is served')
  right.removeAllListeners('data')
  const kept = await exchange(right, `GET /api/y HTTP/1.1\r\nHost: ${authority}\r\n\r\n`)
  t.equal(statusOf(kept), 200, 'and a second one on the same kept-alive connection')
  right.destroy()
  t.notOk(h.upstream.received.at(-1)!.headers['proxy-authorization'], 'Proxy-Authorization reaches no one')
  const sent = h.upstream.received.length

  // the SNI names another host than the CONNECT
  const other = await tlsThrough(h.forwardPort, authority, 'elsewhere.example')
  const refused = await exchange(other, `GET /api/x HTTP/1.1\r\nHost: ${authority}\r\n\r\n`)
  t.equal(statusOf(refused), 421, refused)
  other.destroy()
  t.equal(h.upstream.received.length, sent, 'nothing more reached the upstream')
})

t.test('every other destination is refused 403, the CONNECT\'s answer in the JSON shape', async (t) => {
  const h = await forwardSidecar(t)
  const { head, socket } = await connectThrough(h.forwardPort, 'example.com:443')
  socket.destroy()
  t.equal(statusOf(head), 403)
  const plain = await rawRequest(h.forwardPort, 'GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n')
  t.equal(statusOf(plain), 403)
  t.match(plain, /"error":"destination_not_allowed"/)
  t.equal(await metric(h.adminUrl, 'auth_sidecar_forward_connections_total{outcome="refused"}'), 2)
})

t.test('an https route\'s origin asked over plain HTTP is 403: no credential in clear text', async (t) => {
  const h = await forwardSidecar(t)
  const before = h.upstream.received.length
  const answer = await rawRequest(h.forwardPort, `GET ${h.upstreamOrigin}/api/x HTTP/1.1\r\nHost: ${new URL(h.upstreamOrigin).host}\r\n\r\n`)
  t.equal(statusOf(answer), 403, answer)
  const http = await rawRequest(h.forwardPort, `GET ${h.upstreamOrigin.replace('https:', 'http:')}/api/x HTTP/1.1\r\nHost: x\r\n\r\n`)
  t.equal(statusOf(http), 403, 'nor is the same host over http a route\'s')
  t.equal(h.upstream.received.length, before)
})

t.test('a request on a route\'s origin outside its base path goes on without a credential', async (t) => {
  const h = await forwardSidecar(t)
  const agent = agentFor(h)
  t.teardown(async () => await agent.close())
  const answer = await request(`${h.upstreamOrigin}/elsewhere`, { dispatcher: agent, headers: { authorization: 'Bearer mine' } })
  t.equal(answer.statusCode, 200)
  await answer.body.text()
  const got = h.upstream.received.at(-1)!
  t.equal(got.url, '/elsewhere')
  t.notOk(got.headers.authorization, 'neither the route\'s token nor the application\'s own')
})

t.test('an http route is served to plain absolute-form requests, and a route serves both modes at once', async (t) => {
  const plainUpstream = createHttpServer((req, res) => {
    res.setHeader('content-type', 'application/json')
    res.end(JSON.stringify({ url: req.url, authorization: req.headers.authorization ?? null }))
  })
  await new Promise<void>((resolve) => plainUpstream.listen(0, '127.0.0.1', resolve))
  t.teardown(() => plainUpstream.close())
  const origin = `http://127.0.0.1:${(plainUpstream.address() as AddressInfo).port}`
  const h = await forwardSidecar(t, { ROUTE_PLAIN_BASE_URL: `${origin}/v1`, ROUTE_PLAIN_PATH: '/plain' })
  const forwarded = await rawRequest(h.forwardPort, `GET ${origin}/v1/items?q=2 HTTP/1.1\r\nHost: ignored.example\r\n\r\n`)
  t.equal(statusOf(forwarded), 200, forwarded)
  t.match(forwarded, /"url":"\/v1\/items\?q=2"/)
  t.match(forwarded, /"authorization":"Bearer /, 'with the route\'s token')
  const reverse = await request(`${h.proxyUrl}/plain/items`)
  t.equal(reverse.statusCode, 200)
  t.match(await reverse.body.text(), /"url":"\/v1\/items"/, 'the same route on its reverse-proxy address')
})

t.test('FORWARD_PROXY_ALLOW: an allowed destination is tunnelled untouched; a name that resolves to loopback is not', async (t) => {
  const echo = createServer((socket) => socket.pipe(socket))
  await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve))
  t.teardown(() => echo.close())
  const port = (echo.address() as AddressInfo).port
  const h = await forwardSidecar(t, { FORWARD_PROXY_ALLOW: `127.0.0.1:${port},localhost` })
  const { head, socket } = await connectThrough(h.forwardPort, `127.0.0.1:${port}`)
  t.equal(statusOf(head), 200)
  const echoed = await new Promise<string>((resolve) => {
    socket.once('data', (c: Buffer) => resolve(c.toString()))
    socket.write('ping')
  })
  t.equal(echoed, 'ping', 'bytes pass untouched both ways')
  socket.destroy()
  t.equal(await metric(h.adminUrl, 'auth_sidecar_forward_connections_total{outcome="tunnelled"}'), 1)

  const byName = await connectThrough(h.forwardPort, `localhost:${port}`)
  byName.socket.destroy()
  t.equal(statusOf(byName.head), 403, 'an allowed name that resolves to loopback is never dialled')
})

t.test('a tunnel is closed after UPSTREAM_IDLE_TIMEOUT_MS of silence; a silent CONNECT after the header timeout', async (t) => {
  const echo = createServer((socket) => socket.pipe(socket))
  await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve))
  t.teardown(() => echo.close())
  const port = (echo.address() as AddressInfo).port
  const h = await forwardSidecar(t, { FORWARD_PROXY_ALLOW: '127.0.0.1', UPSTREAM_IDLE_TIMEOUT_MS: '300' }, 400)
  const { socket } = await connectThrough(h.forwardPort, `127.0.0.1:${port}`)
  const started = Date.now()
  await new Promise((resolve) => socket.once('close', resolve))
  t.ok(Date.now() - started < 2_000, 'the silent tunnel was closed')

  const intercepted = await connectThrough(h.forwardPort, new URL(h.upstreamOrigin).host)
  t.equal(statusOf(intercepted.head), 200)
  await new Promise((resolve) => intercepted.socket.once('close', resolve))
  t.pass('a CONNECT that never starts TLS is closed')
})

t.test('tunnels and intercepted connections count toward PROXY_MAX_REQUESTS', async (t) => {
  const echo = createServer((socket) => socket.pipe(socket))
  await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve))
  t.teardown(() => echo.close())
  const port = (echo.address() as AddressInfo).port
  const h = await forwardSidecar(t, { FORWARD_PROXY_ALLOW: '127.0.0.1', PROXY_MAX_REQUESTS: '1' })
  const first = await connectThrough(h.forwardPort, `127.0.0.1:${port}`)
  t.equal(statusOf(first.head), 200)
  const second = await connectThrough(h.forwardPort, `127.0.0.1:${port}`)
  t.equal(statusOf(second.head), 503, 'the second waits for the first: overloaded')
  second.socket.destroy()
  first.socket.destroy()
})

t.test('a WebSocket inside an intercepted connection gets the route\'s token and relays messages', async (t) => {
  const server = createHttpsServer({ key: serverCert.key, cert: serverCert.cert })
  const wss = new WebSocketServer({ server })
  const handshakes: IncomingHttpHeaders[] = []
  wss.on('connection', (socket, req) => {
    handshakes.push(req.headers)
    socket.on('message', (data) => socket.send(`echo:${String(data)}`))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    for (const c of wss.clients) c.terminate()
    server.close()
  })
  const authority = `127.0.0.1:${(server.address() as AddressInfo).port}`
  const h = await forwardSidecar(t, { ROUTE_WS_BASE_URL: `https://${authority}/ws`, ROUTE_WS_PATH: '/ws' })
  const tunnel = await tlsThrough(h.forwardPort, authority)
  const ws = new WebSocket(`wss://${authority}/ws/feed`, { createConnection: () => tunnel })
  const echoed = await new Promise<string>((resolve, reject) => {
    ws.once('open', () => ws.send('hello'))
    ws.once('message', (data) => resolve(String(data)))
    ws.once('error', reject)
  })
  ws.terminate()
  t.equal(echoed, 'echo:hello')
  t.match(handshakes[0]?.authorization, /^Bearer /, 'the upstream\'s handshake carried the route\'s token')
})

t.test('a CONNECT to an allowed destination that refuses the connection is answered 502 upstream_unreachable, logged and counted', async (t) => {
  // 127.0.0.2: a loopback address that is no route's host, allowed by its IP
  const port = await refusingPort('127.0.0.2')
  const h = await forwardSidecar(t, { FORWARD_PROXY_ALLOW: '127.0.0.2' })
  const answer = await rawRequest(h.forwardPort, `CONNECT 127.0.0.2:${port} HTTP/1.1\r\nHost: 127.0.0.2:${port}\r\n\r\n`)
  t.equal(statusOf(answer), 502, answer)
  const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { error: string, message: unknown }
  t.equal(body.error, 'upstream_unreachable', 'the sidecar\'s error shape')
  t.type(body.message, 'string')
  await until(() => h.log.records().some((l) => l.msg === 'request' && l.method === 'CONNECT'))
  t.match(h.log.records().find((l) => l.msg === 'request' && l.method === 'CONNECT'), { route: '-', mode: 'forward', status: 502, destination: `https://127.0.0.2:${port}`, path: `127.0.0.2:${port}` }, 'an access line')
  t.match(h.log.records().find((l) => l.msg === 'forward proxy: tunnel failed'), { upstreamError: 'ECONNREFUSED', destination: `https://127.0.0.2:${port}` })
  t.same(await forwardCounts(h.adminUrl), { intercepted: 0, tunnelled: 1, refused: 0, unreachable: 1, timeout: 0, reset: 0 }, 'tunnelled once, and an upstream error')

  const plain = await rawRequest(h.forwardPort, `GET http://127.0.0.2:${port}/x HTTP/1.1\r\nHost: 127.0.0.2:${port}\r\n\r\n`)
  t.equal(statusOf(plain), 502, 'the absolute form, as before')
  t.match(plain, /"error":"upstream_unreachable"/)
  t.same(await forwardCounts(h.adminUrl), { intercepted: 0, tunnelled: 2, refused: 0, unreachable: 2, timeout: 0, reset: 0 }, 'counted the same way')
})

t.test('each CONNECT and each request for another destination counts one outcome: refused, or tunnelled', async (t) => {
  const allowed = await recordingServer(t, '127.0.0.2')
  const port = new URL(allowed.origin).port
  // localhost: allowed by name, but a name that resolves to loopback is refused
  const h = await forwardSidecar(t, { FORWARD_PROXY_ALLOW: `127.0.0.2,localhost` })
  const byName = await rawRequest(h.forwardPort, `GET http://localhost:${port}/ HTTP/1.1\r\nHost: localhost:${port}\r\n\r\n`)
  t.equal(statusOf(byName), 403, byName)
  t.same(await forwardCounts(h.adminUrl), { intercepted: 0, tunnelled: 0, refused: 1, unreachable: 0, timeout: 0, reset: 0 }, 'a refused request is refused only')
  const connect = await rawRequest(h.forwardPort, `CONNECT localhost:${port} HTTP/1.1\r\nHost: localhost:${port}\r\n\r\n`)
  t.equal(statusOf(connect), 403, connect)
  t.same(await forwardCounts(h.adminUrl), { intercepted: 0, tunnelled: 0, refused: 2, unreachable: 0, timeout: 0, reset: 0 }, 'a refused CONNECT is refused only')
  t.equal(allowed.received.length, 0, 'nothing was sent')

  const passed = await rawRequest(h.forwardPort, `GET ${allowed.origin}/ HTTP/1.1\r\nHost: 127.0.0.2:${port}\r\nAuthorization: Bearer the-applications-own\r\n\r\n`)
  t.equal(statusOf(passed), 200, passed)
  t.equal(allowed.received[0]?.authorization, 'Bearer the-applications-own', 'an allowed destination gets the request as it came')
  t.same(await forwardCounts(h.adminUrl), { intercepted: 0, tunnelled: 1, refused: 2, unreachable: 0, timeout: 0, reset: 0 }, 'a request passed on is tunnelled once')
})

t.test('an https route\'s host asked over plain HTTP is 403 even when FORWARD_PROXY_ALLOW names it; the application\'s Authorization never goes out', async (t) => {
  // the route's host is 127.0.0.1: a plain server on it, on another port than the route's upstream
  const other = await recordingServer(t, '127.0.0.1')
  const h = await forwardSidecar(t, { FORWARD_PROXY_ALLOW: '127.0.0.1,::ffff:127.0.0.1' })
  const before = h.upstream.received.length
  const routePort = new URL(h.upstreamOrigin).port
  const otherPort = new URL(other.origin).port
  const headers = 'Authorization: Bearer the-applications-own\r\n\r\n'
  for (const url of [
    `http://127.0.0.1:${routePort}/api/x`,
    `http://127.0.0.1:${otherPort}/`,
    `http://[::ffff:127.0.0.1]:${otherPort}/`,
    `http://[0:0:0:0:0:ffff:7f00:1]:${otherPort}/`,
    `http://2130706433:${otherPort}/`,
    `http://127.0.0.1.:${otherPort}/`
  ]) {
    const answer = await rawRequest(h.forwardPort, `GET ${url} HTTP/1.1\r\nHost: x\r\n${headers}`)
    t.equal(statusOf(answer), 403, `${url}: ${answer}`)
    t.match(answer, /"error":"destination_not_allowed"/)
  }
  t.equal(h.upstream.received.length, before, 'nothing reached the route\'s upstream')
  t.equal(other.received.length, 0, 'nor any other port of its host')
  t.equal(await metric(h.adminUrl, 'auth_sidecar_forward_connections_total{outcome="refused"}'), 6)

  // the blind tunnel stays open to the same host: what goes inside is the application's TLS
  const { head, socket } = await connectThrough(h.forwardPort, `127.0.0.1:${otherPort}`)
  socket.destroy()
  t.equal(statusOf(head), 200, 'a CONNECT to another port of the host, allowed, is tunnelled')
})
