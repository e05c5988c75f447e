import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'
import t from 'tap'
import { build, send, until } from '../helpers/build.js'

/** An upstream that takes requests and never answers them; closed with the test. */
async function hungUpstream (t: Test): Promise<{ url: string, received: IncomingMessage[] }> {
  const received: IncomingMessage[] = []
  const server = createServer((req) => { received.push(req) })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received }
}

t.test('one route\'s hung upstream fills that route\'s share of PROXY_MAX_REQUESTS only: the other routes keep serving', async (t) => {
  const hung = await hungUpstream(t)
  const h = await build(t, { PROXY_MAX_REQUESTS: '6', ROUTE_HUNG_BASE_URL: hung.url, ROUTE_HUNG_PATH: '/hung' })
  await until(() => h.app.credential.ready())
  const waiting = Array.from({ length: 3 }, async (_, i) => await send(`${h.proxyUrl}/hung/wait?${i}`).catch(() => undefined))
  await until(() => hung.received.length === 3)
  const over = await send(`${h.proxyUrl}/hung/wait?over`)
  t.equal(over.status, 503, 'the hung route is full at half of PROXY_MAX_REQUESTS')
  t.same(JSON.parse(over.body), { error: 'overloaded', message: 'too many requests in progress; retry later' })
  t.equal(hung.received.length, 3, 'and the refused request went nowhere')
  const others = await Promise.all([send(`${h.proxyUrl}/a`), send(`${h.proxyUrl}/b`), send(`${h.proxyUrl}/c`)])
  t.same(others.map((r) => r.status), [200, 200, 200], 'the default route keeps its places')
  const line = h.log.records().find((l) => l.msg === 'request' && l.status === 503)
  t.match(line, { route: 'hung' }, 'the refusal is the hung route\'s')
  void waiting
})

t.test('PROXY_ROUTE_MAX_REQUESTS sets each route\'s share; with the default route alone it has all of PROXY_MAX_REQUESTS', async (t) => {
  const hung = await hungUpstream(t)
  const h = await build(t, { PROXY_MAX_REQUESTS: '6', PROXY_ROUTE_MAX_REQUESTS: '2', ROUTE_HUNG_BASE_URL: hung.url, ROUTE_HUNG_PATH: '/hung' })
  await until(() => h.app.credential.ready())
  for (let i = 0; i < 2; i++) void send(`${h.proxyUrl}/hung/wait?${i}`).catch(() => undefined)
  await until(() => hung.received.length === 2)
  t.equal((await send(`${h.proxyUrl}/hung/x`)).status, 503)
  t.equal((await send(`${h.proxyUrl}/x`)).status, 200)

  const hungDefault = await hungUpstream(t)
  const alone = await build(t, { PROXY_MAX_REQUESTS: '4', BASE_URL: hungDefault.url })
  await until(() => alone.app.credential.ready())
  for (let i = 0; i < 4; i++) void send(`${alone.proxyUrl}/wait?${i}`).catch(() => undefined)
  await until(() => hungDefault.received.length === 4)
  t.equal((await send(`${alone.proxyUrl}/x`)).status, 503, 'four in progress on the only route, then full')
})

t.test('PROXY_MAX_REQUESTS bounds the requests in progress over all listeners, not each one', async (t) => {
  const [hung, hungDefault] = [await hungUpstream(t), await hungUpstream(t)]
  const h = await build(t, { PROXY_MAX_REQUESTS: '2', PROXY_ROUTE_MAX_REQUESTS: '2', BASE_URL: hungDefault.url, ROUTE_OWN_BASE_URL: hung.url, ROUTE_OWN_PORT: '0' })
  await until(() => h.app.credential.ready())
  void send(`${h.proxyUrl}/wait?a`).catch(() => undefined)
  void send(`${h.routeUrls.own}/wait?b`).catch(() => undefined)
  await until(() => hungDefault.received.length === 1 && hung.received.length === 1)
  t.equal((await send(`${h.proxyUrl}/x`)).status, 503, 'PROXY_PORT: two in progress in the process')
  t.equal((await send(`${h.routeUrls.own}/x`)).status, 503, 'the route\'s own port too')
  t.equal((await send(`${h.adminUrl}/healthz`)).status, 200)
})

t.test('the forward proxy\'s tunnels have a share of their own: long-lived tunnels cannot take the routes\' places', async (t) => {
  const { connect } = await import('node:net')
  const silentPeer = await hungUpstream(t)
  const allowed = new URL(silentPeer.url).host
  const h = await build(t, { PROXY_MAX_REQUESTS: '6', FORWARD_PROXY_PORT: '0', FORWARD_PROXY_ALLOW: allowed })
  await until(() => h.app.credential.ready())
  const tunnel = async (): Promise<string> => await new Promise((resolve) => {
    const socket = connect(h.forwardPort!, '127.0.0.1', () => socket.write(`CONNECT ${allowed} HTTP/1.1\r\nHost: ${allowed}\r\n\r\n`))
    socket.on('error', () => {})
    socket.once('data', (c: Buffer) => resolve(c.toString().split('\r\n')[0]!))
    t.teardown(() => socket.destroy())
  })
  const opened = [await tunnel(), await tunnel(), await tunnel()]
  t.same(opened.map((line) => line.split(' ')[1]), ['200', '200', '200'], 'three tunnels, half of PROXY_MAX_REQUESTS')
  t.equal((await tunnel()).split(' ')[1], '503', 'the fourth: their share is full')
  const served = await Promise.all([send(`${h.proxyUrl}/a`), send(`${h.proxyUrl}/b`), send(`${h.proxyUrl}/c`)])
  t.same(served.map((r) => r.status), [200, 200, 200], 'the default route keeps its places')
})
