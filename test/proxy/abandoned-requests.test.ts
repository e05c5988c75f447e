import { connect, type AddressInfo, type Socket } from 'node:net'
import t from 'tap'
import { build, until } from '../helpers/build.js'
import { connectProxy } from '../helpers/connect-proxy.js'

function client (port: number, path: string): Socket {
  const socket = connect(port, '127.0.0.1')
  socket.on('error', () => {})
  socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`)
  return socket
}

t.test('a request given up while its upstream connection opens keeps its place until then: no more connections open than UPSTREAM_CONNECTIONS, none for a request whose client has gone', async (t) => {
  const proxy = await connectProxy(t)
  const h = await build(t, { HTTP_PROXY: proxy.url, UPSTREAM_CONNECTIONS: '1' })
  await until(() => h.app.credential.ready())
  proxy.hold()
  const before = proxy.tunnels.length
  const connects = (): number => proxy.tunnels.length - before
  const departed = (): number => h.log.records().filter((l) => l.msg === 'request' && l.status === 499).length
  const first = client(h.proxyPort, '/api-first')
  await until(() => connects() === 1)
  const second = client(h.proxyPort, '/api-second')
  const third = client(h.proxyPort, '/api-third')
  // the first client leaves while its connection is being opened; the others still wait
  first.destroy()
  await until(() => departed() === 1)
  second.destroy()
  third.destroy()
  await until(() => departed() === 3)
  proxy.open()
  // the given-up request is cut as its connection opens, before anything is
  // written; a client that comes now is served after what was queued before it
  const after = await fetch(`${h.proxyUrl}/api-after`)
  t.equal(after.status, 200)
  t.equal(connects(), 2, 'a connection for the request whose client was there, and one for the client that came after: none for those that left while queued')
  t.same(h.upstream.received.map((r) => r.url), ['/api/api-after'], 'only the last reached the upstream')
})

t.test('a request whose client has gone (its end read) by the time it would be sent is never sent', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  for (let i = 0; i < 20; i++) {
    const socket = connect(h.proxyPort, '127.0.0.1')
    socket.on('error', () => {})
    socket.end(`GET /api-gone-${i} HTTP/1.1\r\nHost: x\r\n\r\n`)
  }
  await until(() => h.log.records().filter((l) => l.msg === 'request' && String(l.path).startsWith('/api-gone-')).length === 20)
  t.equal(h.upstream.received.filter((r) => r.url.includes('gone')).length, 0, 'none reached the upstream')
  t.equal((await fetch(`${h.proxyUrl}/after`)).status, 200, 'a client that stays is served')
})

t.test('an upstream that refuses connections gives each request its 502 and its place back: the route serves once the upstream is back', async (t) => {
  const { createServer: createHttpServer } = await import('node:http')
  const placeholder = createHttpServer()
  await new Promise<void>((resolve) => placeholder.listen(0, '127.0.0.1', resolve))
  const port = (placeholder.address() as AddressInfo).port
  await new Promise<void>((resolve) => placeholder.close(() => resolve()))
  const h = await build(t, { BASE_URL: `http://127.0.0.1:${port}/api`, UPSTREAM_CONNECTIONS: '1', UPSTREAM_TIMEOUT_MS: '5000' })
  await until(() => h.app.credential.ready())
  const statuses: number[] = []
  for (let i = 0; i < 4; i++) statuses.push((await fetch(`${h.proxyUrl}/refused-${i}`)).status)
  t.same(statuses, [502, 502, 502, 502], 'each refused at once, none left waiting for a place')
  const back = createHttpServer((_req, res) => res.end('back'))
  await new Promise<void>((resolve) => back.listen(port, '127.0.0.1', resolve))
  t.teardown(() => { back.closeAllConnections(); back.close() })
  t.equal((await fetch(`${h.proxyUrl}/again`)).status, 200, 'the route serves again')
})
