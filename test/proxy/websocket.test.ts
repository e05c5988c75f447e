import { createServer, type IncomingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import WebSocket, { WebSocketServer } from 'ws'
import { build, rawRequest, statusOf, until } from '../helpers/build.js'

interface Handshake { url: string, headers: IncomingHttpHeaders, protocol: string }

async function wsUpstream (t: Test): Promise<{ url: string, handshakes: Handshake[] }> {
  const handshakes: Handshake[] = []
  const server = createServer()
  const wss = new WebSocketServer({ server })
  wss.on('connection', (socket, req) => {
    handshakes.push({ url: req.url ?? '', headers: req.headers, protocol: socket.protocol })
    if (req.url?.includes('/die')) {
      socket.send('about to die')
      setTimeout(() => socket.terminate(), 50) // no close frame: abnormal closure
      return
    }
    socket.on('message', (data, binary) => socket.send(binary ? data : `echo:${String(data)}`, { binary }))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    for (const c of wss.clients) c.terminate()
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, handshakes }
}

/** Messages received so far, per socket: a message may arrive in the same tick as 'open'. */
const inbox = new WeakMap<WebSocket, string[]>()

function open (url: string, protocols: string[] = [], headers: Record<string, string> = {}): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, protocols, { headers })
    const messages: string[] = []
    inbox.set(ws, messages)
    ws.on('message', (d) => messages.push(String(d)))
    ws.once('open', () => resolve(ws))
    ws.once('error', reject)
    ws.once('unexpected-response', (_req, res) => reject(new Error(`status ${res.statusCode}`)))
  })
}

const next = async (ws: WebSocket): Promise<string> => {
  const messages = inbox.get(ws)!
  while (messages.length === 0) await new Promise((resolve) => setTimeout(resolve, 5))
  return messages.shift()!
}
const closed = (ws: WebSocket): Promise<number> => new Promise((resolve) => ws.once('close', (code) => resolve(code)))

t.test('the upgrade carries the sidecar\'s Authorization; subprotocols and messages pass', async (t) => {
  const up = await wsUpstream(t)
  const h = await build(t, { BASE_URL: `${up.url}/api` })
  await until(() => h.app.tokens.ready())
  const ws = await open(`${h.proxyUrl.replace('http', 'ws')}/stream?x=1`, ['chat.v1'], { authorization: 'Bearer client-token', 'x-app': 'legacy' })
  t.equal(ws.protocol, 'chat.v1')
  ws.send('hello')
  t.equal(await next(ws), 'echo:hello')
  const hs = up.handshakes[0]!
  t.equal(hs.url, '/api/stream?x=1', 'path joined under the prefix, query kept')
  t.equal(hs.headers.authorization, h.app.tokens.current(), 'the sidecar\'s token, not the client\'s')
  t.ok(h.tokenServer.verify(hs.headers.authorization).ok)
  t.equal(hs.protocol, 'chat.v1', 'subprotocol forwarded')
  t.equal(hs.headers['x-app'], 'legacy')
  t.ok(hs.headers['x-request-id'])
  const done = closed(ws)
  ws.close(1000, 'bye')
  t.equal(await done, 1000)
})

t.test('an abnormal upstream close reaches the client as a valid close frame', async (t) => {
  const up = await wsUpstream(t)
  const h = await build(t, { BASE_URL: up.url })
  await until(() => h.app.tokens.ready())
  const ws = await open(`${h.proxyUrl.replace('http', 'ws')}/die`)
  const done = closed(ws)
  t.equal(await next(ws), 'about to die')
  const code = await done
  t.not(code, 1006, 'the client got a close frame, not a dropped connection')
  t.ok(code >= 1000 && code < 5000, `close code ${code}`)
})

t.test('hostile upgrade targets are refused like any other request', async (t) => {
  const up = await wsUpstream(t)
  const h = await build(t, { BASE_URL: `${up.url}/api` })
  await until(() => h.app.tokens.ready())
  // raw bytes: a WebSocket client would normalise the dot segments away
  for (const target of ['/a/%2e%2e/%2e%2e/x', '//127.0.0.2:1/x', 'ws://127.0.0.2:1/x']) {
    const raw = await rawRequest(h.proxyPort, `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`)
    t.equal(statusOf(raw), 400, target)
  }
  t.equal(up.handshakes.length, 0)
})

t.test('no token: the upgrade gets 503', async (t) => {
  const up = await wsUpstream(t)
  const h = await build(t, { BASE_URL: up.url, TOKEN_WAIT_MS: '100' }, { users: { 'service-user': 'other' } })
  await until(() => h.tokenServer.grants.length > 0)
  await t.rejects(open(`${h.proxyUrl.replace('http', 'ws')}/x`), /status 503/)
  t.equal(up.handshakes.length, 0)
})

t.test('open sockets are closed on shutdown', async (t) => {
  const up = await wsUpstream(t)
  const h = await build(t, { BASE_URL: up.url })
  await until(() => h.app.tokens.ready())
  const ws = await open(`${h.proxyUrl.replace('http', 'ws')}/x`)
  const done = closed(ws)
  const started = Date.now()
  await h.app.close(5_000)
  const code = await done
  t.ok(code === 1000 || code === 1001 || code === 1005, `closed with ${code}`)
  t.ok(Date.now() - started < 4_000, 'without waiting out the grace period')
})
