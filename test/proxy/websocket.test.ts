import { createServer, type IncomingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import WebSocket, { WebSocketServer } from 'ws'
import { build, rawRequest, statusOf, until } from '../helpers/build.js'
import { connectProxy } from '../helpers/connect-proxy.js'

interface Handshake { url: string, headers: IncomingHttpHeaders, protocol: string }

async function wsUpstream (t: Test): Promise<{ url: string, handshakes: Handshake[], wss: WebSocketServer }> {
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
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, handshakes, wss }
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
  await until(() => h.app.credential.ready())
  const ws = await open(`${h.proxyUrl.replace('http', 'ws')}/stream?x=1`, ['chat.v1'], { authorization: 'Bearer client-token', 'x-app': 'legacy' })
  t.equal(ws.protocol, 'chat.v1')
  ws.send('hello')
  t.equal(await next(ws), 'echo:hello')
  const hs = up.handshakes[0]!
  t.equal(hs.url, '/api/stream?x=1', 'path joined under the prefix, query kept')
  t.equal(hs.headers.authorization, h.app.credential.current()?.header, 'the sidecar\'s token, not the client\'s')
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
  await until(() => h.app.credential.ready())
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
  await until(() => h.app.credential.ready())
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
  await until(() => h.app.credential.ready())
  const ws = await open(`${h.proxyUrl.replace('http', 'ws')}/x`)
  const done = closed(ws)
  const started = Date.now()
  await h.app.close(5_000)
  const code = await done
  t.ok(code === 1000 || code === 1001 || code === 1005, `closed with ${code}`)
  t.ok(Date.now() - started < 4_000, 'without waiting out the grace period')
})

const HANDSHAKE = 'Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n'

t.test('handshakes that cannot be forwarded faithfully get 400 before anything reaches the upstream; the process and its fds hold', async (t) => {
  const up = await wsUpstream(t)
  const h = await build(t, { BASE_URL: `${up.url}/api` })
  await until(() => h.app.credential.ready())
  const { readdirSync } = await import('node:fs')
  const fds = (): number => readdirSync('/proc/self/fd').length
  const before = fds()
  const cases: Array<[string, string]> = [
    ['a fragment', `GET /x#frag HTTP/1.1\r\nHost: x\r\n${HANDSHAKE}\r\n`],
    ['a malformed subprotocol', `GET /x HTTP/1.1\r\nHost: x\r\n${HANDSHAKE}Sec-WebSocket-Protocol: chat v1, ,\r\n\r\n`],
    ['a repeated subprotocol', `GET /x HTTP/1.1\r\nHost: x\r\n${HANDSHAKE}Sec-WebSocket-Protocol: a, a\r\n\r\n`],
    ['two Sec-WebSocket-Protocol headers', `GET /x HTTP/1.1\r\nHost: x\r\n${HANDSHAKE}Sec-WebSocket-Protocol: a\r\nSec-WebSocket-Protocol: b\r\n\r\n`],
    ['no key', 'GET /x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\r\n'],
    ['an unknown version', `GET /x HTTP/1.1\r\nHost: x\r\n${HANDSHAKE.replace('Version: 13', 'Version: 8')}\r\n`],
    ['a body', `GET /x HTTP/1.1\r\nHost: x\r\n${HANDSHAKE}Content-Length: 5\r\n\r\nhello`],
    ['a chunked body', `GET /x HTTP/1.1\r\nHost: x\r\n${HANDSHAKE}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n`]
  ]
  for (let round = 0; round < 5; round++) {
    for (const [name, text] of cases) t.equal(statusOf(await rawRequest(h.proxyPort, text)), 400, `${name} (round ${round + 1})`)
  }
  t.equal(up.handshakes.length, 0, 'the upstream saw none of them')
  await new Promise((resolve) => setTimeout(resolve, 200))
  t.ok(fds() <= before + 2, `fds ${before} → ${fds()}`)
  const lines = h.log.records().filter((r) => r.msg === 'request' && r.status === 400)
  t.equal(lines.length, cases.length * 5, 'each refusal has its access-log line')
  const ws = await open(`${h.proxyUrl.replace('http', 'ws')}/after`)
  ws.close()
  t.pass('and a good handshake still works')
})

t.test('an unreachable upstream gives 502, one that never answers the handshake 504 after UPSTREAM_TIMEOUT_MS; sessions are logged', async (t) => {
  const { createServer: createNetServer } = await import('node:net')
  const closedPort = await new Promise<number>((resolve) => {
    const s = createNetServer().listen(0, '127.0.0.1', () => { const p = (s.address() as AddressInfo).port; s.close(() => resolve(p)) })
  })
  const down = await build(t, { BASE_URL: `http://127.0.0.1:${closedPort}` })
  await until(() => down.app.credential.ready())
  t.equal(statusOf(await rawRequest(down.proxyPort, `GET /x HTTP/1.1\r\nHost: x\r\n${HANDSHAKE}\r\n`)), 502)

  const silent = createNetServer((socket) => { socket.on('error', () => {}); socket.resume() }) // reads, never answers
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { silent.close(() => resolve()) }))
  const mute = await build(t, { BASE_URL: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`, UPSTREAM_TIMEOUT_MS: '400' })
  await until(() => mute.app.credential.ready())
  const started = Date.now()
  t.equal(statusOf(await rawRequest(mute.proxyPort, `GET /x HTTP/1.1\r\nHost: x\r\n${HANDSHAKE}\r\n`)), 504)
  t.ok(Date.now() - started < 2_000, `answered after ${Date.now() - started} ms`)

  const up = await wsUpstream(t)
  const h = await build(t, { BASE_URL: up.url })
  await until(() => h.app.credential.ready())
  const ws = await open(`${h.proxyUrl.replace('http', 'ws')}/session?q=1`)
  const done = closed(ws)
  ws.close(1000)
  await done
  await until(() => h.log.records().some((r) => r.msg === 'request' && r.status === 101))
  t.match(h.log.records().find((r) => r.status === 101), { method: 'GET', path: '/session' })
  await until(() => down.log.records().some((r) => r.msg === 'request' && r.status === 502))
})

t.test('a handshake still waiting for the upstream does not hold up shutdown', async (t) => {
  const { createServer: createNetServer } = await import('node:net')
  const silent = createNetServer((socket) => { socket.on('error', () => {}); socket.resume() })
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { silent.close(() => resolve()) }))
  const h = await build(t, { BASE_URL: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`, UPSTREAM_TIMEOUT_MS: '30000' })
  await until(() => h.app.credential.ready())
  const pending = rawRequest(h.proxyPort, `GET /x HTTP/1.1\r\nHost: x\r\n${HANDSHAKE}\r\n`, 10_000)
  await new Promise((resolve) => setTimeout(resolve, 200))
  const started = Date.now()
  await h.app.close(5_000)
  t.ok(Date.now() - started < 2_000, `closed in ${Date.now() - started} ms`)
  await pending
})

t.test('WebSockets go through HTTP_PROXY like everything else; NO_PROXY bypasses it', async (t) => {
  const proxy = await connectProxy(t)
  const up = await wsUpstream(t)
  const upstreamAuthority = new URL(up.url).host
  const h = await build(t, { BASE_URL: up.url, HTTP_PROXY: proxy.url })
  await until(() => h.app.credential.ready())
  const ws = await open(`${h.proxyUrl.replace('http', 'ws')}/through`)
  ws.send('hi')
  t.equal(await next(ws), 'echo:hi')
  t.ok(proxy.tunnels.includes(upstreamAuthority), `tunnelled to ${upstreamAuthority}: ${proxy.tunnels.join(' ')}`)
  t.equal(up.handshakes.at(-1)!.headers.authorization, h.app.credential.current()?.header)
  ws.close()

  const before = proxy.tunnels.filter((x) => x === upstreamAuthority).length
  const direct = await build(t, { BASE_URL: up.url, HTTP_PROXY: proxy.url, NO_PROXY: '127.0.0.1' })
  await until(() => direct.app.credential.ready())
  const ws2 = await open(`${direct.proxyUrl.replace('http', 'ws')}/direct`)
  ws2.close()
  t.equal(proxy.tunnels.filter((x) => x === upstreamAuthority).length, before, 'NO_PROXY: not tunnelled')
})

t.test('an egress proxy that refuses the tunnel: the handshake gets 502', async (t) => {
  const up = await wsUpstream(t)
  const refused = new URL(up.url).host
  // tunnels to the token server, refuses the upstream
  const proxy = await connectProxy(t, (authority) => authority === refused)
  const h = await build(t, { BASE_URL: up.url, HTTP_PROXY: proxy.url })
  await until(() => h.app.credential.ready())
  t.equal(statusOf(await rawRequest(h.proxyPort, `GET /x HTTP/1.1\r\nHost: x\r\n${HANDSHAKE}\r\n`)), 502)
  t.equal(up.handshakes.length, 0)
})

t.test('a message larger than WEBSOCKET_MAX_MESSAGE_BYTES closes the session with 1009, either way; smaller ones pass', async (t) => {
  const up = await wsUpstream(t)
  const h = await build(t, { BASE_URL: up.url, WEBSOCKET_MAX_MESSAGE_BYTES: '65536' })
  await until(() => h.app.credential.ready())
  const ws = await open(`${h.proxyUrl.replace('http', 'ws')}/big`)
  ws.send(Buffer.alloc(60_000, 1), { binary: true })
  t.equal(Buffer.byteLength(await next(ws)), 60_000, 'under the bound: relayed')
  const done = closed(ws)
  ws.send(Buffer.alloc(70_000, 2), { binary: true })
  t.equal(await done, 1009, 'over it: 1009 (message too big)')

  // an upstream that sends too much: the client gets 1009 too
  const server = createServer()
  const wss = new WebSocketServer({ server })
  wss.on('connection', (socket) => socket.send(Buffer.alloc(70_000, 3)))
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const c of wss.clients) c.terminate(); server.close() })
  const h2 = await build(t, { BASE_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, WEBSOCKET_MAX_MESSAGE_BYTES: '65536' })
  await until(() => h2.app.credential.ready())
  const ws2 = new WebSocket(`${h2.proxyUrl.replace('http', 'ws')}/x`)
  t.equal(await closed(ws2), 1009)
})

t.test('a client that reads nothing: the upstream is no longer read once a megabyte waits for it', async (t) => {
  // an upstream that sends as fast as its socket takes it, and counts
  const server = createServer()
  const wss = new WebSocketServer({ server })
  let sent = 0
  wss.on('connection', (socket) => {
    const chunk = Buffer.alloc(16 * 1024, 7)
    const pump = (): void => {
      while (socket.readyState === WebSocket.OPEN && socket.bufferedAmount < 256 * 1024) { socket.send(chunk); sent += chunk.length }
      if (socket.readyState === WebSocket.OPEN) setTimeout(pump, 5)
    }
    pump()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const c of wss.clients) c.terminate(); server.closeAllConnections(); server.close() })
  const h = await build(t, { BASE_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}` })
  await until(() => h.app.credential.ready())
  const ws = await open(`${h.proxyUrl.replace('http', 'ws')}/flood`)
  ;(ws as unknown as { _socket: { pause(): void } })._socket.pause() // this test's client stops reading
  await new Promise((resolve) => setTimeout(resolve, 1_500))
  const after = sent
  await new Promise((resolve) => setTimeout(resolve, 1_000))
  t.ok(sent - after < 512 * 1024, `the upstream could send ${((sent - after) / 1024).toFixed(0)} KiB more in a second once the sidecar stopped reading`)
  t.ok(sent < 32 * 1024 * 1024, `${(sent / 1024 / 1024).toFixed(1)} MiB sent in all, held in socket buffers, not the sidecar`)
  ws.terminate()
})

t.test('a client that leaves during the handshake takes the upstream connection with it at once, and the line is its own (499)', async (t) => {
  // an upstream that takes the connection and never answers the handshake
  const held: import('node:net').Socket[] = []
  const server = createServer()
  // it reads, so that it notices when the sidecar closes the connection
  server.on('upgrade', (_req, socket) => { held.push(socket as import('node:net').Socket); socket.resume() })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const s of held) s.destroy(); server.close() })
  const h = await build(t, { BASE_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, UPSTREAM_TIMEOUT_MS: '30000' })
  await until(() => h.app.credential.ready())
  const client = (await import('node:net')).connect(h.proxyPort, '127.0.0.1')
  client.write('GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n')
  await until(() => held.length === 1)
  const upstreamClosed = new Promise<number>((resolve) => held[0]!.once('end', () => resolve(Date.now())))
  const left = Date.now()
  client.end()
  const closedAt = await Promise.race([upstreamClosed, new Promise<number>((resolve) => setTimeout(() => resolve(Infinity), 3_000))])
  t.ok(closedAt - left < 1_000, 'the upstream connection closed within a second, not after UPSTREAM_TIMEOUT_MS')
  await until(() => h.log.records().some((r) => r.msg === 'request' && r.path === '/ws'))
  const line = h.log.records().find((r) => r.msg === 'request' && r.path === '/ws')!
  t.equal(line.status, 499)
  t.notOk(h.log.records().some((r) => r.msg === 'websocket upstream failed'), 'not blamed on the upstream')
})

t.test('when the client side of a handshake fails after the upstream\'s succeeded, the upstream connection is closed', async (t) => {
  const up = await wsUpstream(t)
  const h = await build(t, { BASE_URL: up.url })
  await until(() => h.app.credential.ready())
  const client = (await import('node:net')).connect(h.proxyPort, '127.0.0.1')
  client.write('GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n')
  // the client gives up the moment the upstream has accepted the upgrade
  await until(() => up.handshakes.length === 1)
  client.destroy()
  await until(() => up.wss.clients.size === 0, 2_000).catch(() => {})
  t.equal(up.wss.clients.size, 0, 'the upstream WebSocket was closed')
})

t.test('upgrades meet the ordinary request\'s guard: two Host headers, a Connection naming host, content-length or transfer-encoding, TRACE or POST: refused, nothing upstream', async (t) => {
  const up = await wsUpstream(t)
  const h = await build(t, { BASE_URL: up.url })
  await until(() => h.app.credential.ready())
  const key = 'Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n'
  const cases: Array<[string, string, number]> = [
    ['two Host headers', `GET /x HTTP/1.1\r\nHost: x\r\nHost: evil.example\r\nConnection: Upgrade\r\n${key}\r\n`, 400],
    ['Connection naming host', `GET /x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, host\r\n${key}\r\n`, 400],
    ['Connection naming content-length', `GET /x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, content-length\r\n${key}\r\n`, 400],
    ['Connection naming transfer-encoding', `GET /x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, Transfer-Encoding\r\n${key}\r\n`, 400],
    ['TRACE', `TRACE /x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n${key}\r\n`, 405],
    ['POST', `POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: Upgrade\r\n${key}\r\n`, 400]
  ]
  for (const [name, text, status] of cases) {
    const raw = await rawRequest(h.proxyPort, text)
    t.equal(statusOf(raw), status, name)
    t.match(raw, /"error":"(bad_request|method_not_allowed)"/, `${name}: the sidecar's JSON`)
  }
  await new Promise((resolve) => setTimeout(resolve, 100))
  t.equal(up.handshakes.length, 0, 'no handshake reached the upstream')
  t.same(h.log.records().filter((r) => r.msg === 'request').map((r) => r.status), cases.map(([, , status]) => status), 'each has its access line')
})

t.test('handshakes count against PROXY_MAX_REQUESTS: beyond it 503 overloaded, never sent upstream', async (t) => {
  const { createServer: createNetServer } = await import('node:net')
  let connections = 0
  const silent = createNetServer((socket) => { connections++; socket.on('error', () => {}); socket.resume() })
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { silent.close(() => resolve()) }))
  const h = await build(t, { BASE_URL: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`, PROXY_MAX_REQUESTS: '5', UPSTREAM_TIMEOUT_MS: '3000' })
  await until(() => h.app.credential.ready())
  const answers = await Promise.all(Array.from({ length: 200 }, async () => statusOf(await rawRequest(h.proxyPort, `GET /x HTTP/1.1\r\nHost: x\r\n${HANDSHAKE}\r\n`, 6_000))))
  t.equal(answers.filter((s) => s === 503).length, 195, 'all but five refused at once')
  t.equal(answers.filter((s) => s === 504).length, 5, 'five waited for the silent upstream, until UPSTREAM_TIMEOUT_MS')
  t.equal(connections, 5, 'five upstream connections')
  t.equal((await fetch(`${h.adminUrl}/healthz`)).status, 200)
})

t.test('interim answers and a handshake answered a byte at a time: 504 at UPSTREAM_TIMEOUT_MS', async (t) => {
  const { createServer: createNetServer } = await import('node:net')
  const drip = createNetServer((socket) => {
    socket.on('error', () => {})
    socket.once('data', () => {
      const answer = 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
      let i = 0
      const timer = setInterval(() => { if (i < answer.length && !socket.destroyed) socket.write(answer[i++]!); else clearInterval(timer) }, 200)
      socket.on('close', () => clearInterval(timer))
    })
  })
  await new Promise<void>((resolve) => drip.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { drip.close(() => resolve()) }))
  const h = await build(t, { BASE_URL: `http://127.0.0.1:${(drip.address() as AddressInfo).port}`, UPSTREAM_TIMEOUT_MS: '1000' })
  await until(() => h.app.credential.ready())
  const started = Date.now()
  t.equal(statusOf(await rawRequest(h.proxyPort, `GET /x HTTP/1.1\r\nHost: x\r\n${HANDSHAKE}\r\n`, 10_000)), 504)
  t.ok(Date.now() - started < 2_000, `answered after ${Date.now() - started} ms, against a timeout of 1000`)
})

t.test('a handshake answered with a status outside 200-599: 502, and no such status in the metrics', async (t) => {
  const { createServer: createNetServer } = await import('node:net')
  const odd = createNetServer((socket) => {
    socket.on('error', () => {})
    socket.once('data', () => socket.end('HTTP/1.1 777 Odd\r\ncontent-length: 0\r\n\r\n'))
  })
  await new Promise<void>((resolve) => odd.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { odd.close(() => resolve()) }))
  const h = await build(t, { BASE_URL: `http://127.0.0.1:${(odd.address() as AddressInfo).port}` })
  await until(() => h.app.credential.ready())
  t.equal(statusOf(await rawRequest(h.proxyPort, `GET /x HTTP/1.1\r\nHost: x\r\n${HANDSHAKE}\r\n`)), 502)
  const metrics = await (await fetch(`${h.adminUrl}/metrics`)).text()
  t.notMatch(metrics, /status="777"/)
  t.match(metrics, /auth_sidecar_proxy_request_duration_seconds_count\{status="502",route="default"\} 1/)
})
