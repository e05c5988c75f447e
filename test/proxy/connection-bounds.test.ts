import { connect, type Socket } from 'node:net'
import type { Test } from 'tap'
import t from 'tap'
import { fitConnections } from '../../src/connections.js'
import { build, metric, send, until } from '../helpers/build.js'

/** Opens `count` connections that send nothing; resolves once each is open, with a count of those the server closed since. */
async function silent (t: Test, port: number, count: number): Promise<{ sockets: Socket[], closed: () => number }> {
  let closed = 0
  const sockets = await Promise.all(Array.from({ length: count }, async () => await new Promise<Socket>((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => resolve(socket))
    socket.on('error', () => {})
    socket.once('close', () => { closed++ })
    socket.once('error', reject)
  })))
  t.teardown(() => { for (const socket of sockets) socket.destroy() })
  return { sockets, closed: () => closed }
}

t.test('silent connections to the admin port beyond ADMIN_MAX_CONNECTIONS close the oldest idle ones: probes and proxied requests keep being answered', async (t) => {
  const h = await build(t, { ADMIN_MAX_CONNECTIONS: '8' })
  await until(() => h.app.credential.ready())
  const port = Number(new URL(h.adminUrl).port)
  const flood = await silent(t, port, 60)
  await until(() => flood.closed() >= 52)
  t.equal(flood.closed(), 52, 'at most 8 stay open')
  t.ok(flood.sockets.slice(0, 52).every((s) => s.destroyed), 'the oldest went first')
  t.equal((await send(`${h.adminUrl}/readyz`)).status, 200, 'the probe is answered')
  t.equal((await send(`${h.proxyUrl}/x`)).status, 200, 'the proxy is untouched')
  t.ok(await metric(h.adminUrl, 'auth_sidecar_connections_shed_total{listener="ADMIN_PORT",reason="idle"}') >= 52, 'each counted')
  t.equal(await metric(h.adminUrl, 'auth_sidecar_connections_shed_total{listener="PROXY_PORT",reason="idle"}'), 0)
})

t.test('silent connections to the proxy port beyond PROXY_MAX_CONNECTIONS make way for new ones; a connection with a request in progress is never closed for them', async (t) => {
  const h = await build(t, { PROXY_MAX_CONNECTIONS: '6' })
  await until(() => h.app.credential.ready())
  const busy = send(`${h.proxyUrl}/_slow/1500`)
  await until(() => h.upstream.received.length === 1)
  const flood = await silent(t, h.proxyPort, 40)
  await until(() => flood.closed() >= 35)
  t.equal(flood.closed(), 35, 'five silent ones beside the busy one')
  t.equal((await send(`${h.proxyUrl}/after-the-flood`)).status, 200, 'a new client is served')
  t.equal((await busy).status, 200, 'the request in progress got its answer')
  t.equal((await send(`${h.adminUrl}/readyz`)).status, 200)
})

t.test('when every connection is busy, a new one is closed at once and counted as full', async (t) => {
  const h = await build(t, { PROXY_MAX_CONNECTIONS: '2' })
  await until(() => h.app.credential.ready())
  const busy = [send(`${h.proxyUrl}/_slow/1500?a`), send(`${h.proxyUrl}/_slow/1500?b`)]
  await until(() => h.upstream.received.length === 2)
  const refused = await send(`${h.proxyUrl}/third`).then(() => 'answered', (err: Error) => err.message)
  t.not(refused, 'answered', 'the third connection is closed')
  t.same((await Promise.all(busy)).map((r) => r.status), [200, 200])
  t.equal(await metric(h.adminUrl, 'auth_sidecar_connections_shed_total{listener="PROXY_PORT",reason="full"}'), 1)
})

t.test('connection bounds fit the file descriptor limit, keeping what the upstream pools and the token renewal need', async (t) => {
  t.same(fitConnections({ proxy: 1024, admin: 64, proxyListeners: 1, upstreamConnections: 128, limit: 1024 }), { proxy: 384, admin: 64, needed: 2304 }, 'ulimit -n 1024: each proxy connection may hold one upstream')
  t.same(fitConnections({ proxy: 1024, admin: 64, proxyListeners: 3, upstreamConnections: 3 * 128, limit: 1024 }), { proxy: 85, admin: 64, needed: 6656 }, 'three listeners share it')
  t.same(fitConnections({ proxy: 1024, admin: 64, proxyListeners: 2, upstreamConnections: 256, limit: 1_048_576 }), { proxy: 1024, admin: 64, needed: 4480 }, 'a large limit keeps the bounds asked for')
  t.same(fitConnections({ proxy: 1024, admin: 64, proxyListeners: 1, upstreamConnections: 128, limit: undefined }), { proxy: 1024, admin: 64, needed: 2304 }, 'no limit known')
  const h = await build(t, {}, {}, { descriptorLimit: 1024 })
  const line = h.log.records().find((l) => l.event === 'config' && l.proxyMaxConnections !== undefined)
  t.match(line, { level: 40, descriptorLimit: 1024, proxyMaxConnections: 384, adminMaxConnections: 64 }, 'a warning says the limit lowered them')
  t.match(line?.msg, /ulimit -n\) 1024 lowers PROXY_MAX_CONNECTIONS=1024 to 384 per proxy listener, .*a limit of 2304 holds the bounds asked for/, 'naming what it lowered and the limit that would do')
  t.notMatch(line?.msg, /ADMIN_MAX_CONNECTIONS/, 'not what it kept')
})

t.test('requests with slow bodies cannot hold the admin port\'s connections: a body is refused before it is read', async (t) => {
  const h = await build(t, { ADMIN_MAX_CONNECTIONS: '8' })
  await until(() => h.app.credential.ready())
  const port = Number(new URL(h.adminUrl).port)
  const slow = await silent(t, port, 20)
  const answers = slow.sockets.map((socket) => new Promise<string>((resolve) => {
    let text = ''
    socket.on('data', (c: Buffer) => { text += c.toString() })
    socket.once('close', () => resolve(text))
  }))
  for (const socket of slow.sockets) socket.write('POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\nx')
  // the bodies are never sent: each connection is answered and closed, or it is held
  const said = await Promise.race([Promise.all(answers), new Promise<string[]>((resolve) => setTimeout(() => resolve(['held']), 5_000).unref())])
  t.ok(said.every((text) => text === '' || text.startsWith('HTTP/1.1 405')), 'each answered 405 and closed without its body, or shed')
  t.ok(said.some((text) => text.startsWith('HTTP/1.1 405')), 'answered without waiting for the body')
  const probe = await fetch(`${h.adminUrl}/readyz`, { signal: AbortSignal.timeout(5_000) }).then((r) => r.status, (err: Error) => err.name)
  t.equal(probe, 200, 'the probe is answered')
})
