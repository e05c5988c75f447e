import { createServer } from 'node:http'
import { connect, type AddressInfo, type Socket } from 'node:net'
import type { Test } from 'tap'
import t from 'tap'
import { build, until } from '../helpers/build.js'

/** An egress proxy whose CONNECTs, after `hold()`, wait until `open()`: the time undici spends opening an upstream connection, held. */
async function heldProxy (t: Test): Promise<{ url: string, connects: () => number, hold: () => void, open: () => void }> {
  const held: Array<() => void> = []
  let connects = 0
  let opened = true
  const proxy = createServer((_req, res) => { res.writeHead(405).end() })
  proxy.on('connect', (req, client: Socket, head: Buffer) => {
    connects++
    const go = (): void => {
      const [host, port] = (req.url ?? '').split(':')
      const target = connect(Number(port), host, () => {
        client.write('HTTP/1.1 200 Connection Established\r\n\r\n')
        target.write(head)
        target.pipe(client)
        client.pipe(target)
      })
      target.on('error', () => client.destroy())
      client.on('error', () => target.destroy())
      client.on('close', () => target.destroy())
    }
    if (opened) go()
    else held.push(go)
  })
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { proxy.closeAllConnections(); proxy.close() })
  return {
    url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
    connects: () => connects,
    hold: () => { opened = false; connects = 0 },
    open: () => { opened = true; for (const go of held.splice(0)) go() }
  }
}

function client (port: number, path: string): Socket {
  const socket = connect(port, '127.0.0.1')
  socket.on('error', () => {})
  socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`)
  return socket
}

t.test('a request given up while its upstream connection opens keeps its place until then: no more connections open than UPSTREAM_CONNECTIONS, none for a request whose client has gone', async (t) => {
  const proxy = await heldProxy(t)
  const h = await build(t, { HTTP_PROXY: proxy.url, UPSTREAM_CONNECTIONS: '1' })
  await until(() => h.app.credential.ready())
  proxy.hold()
  const departed = (): number => h.log.records().filter((l) => l.msg === 'request' && l.status === 499).length
  const first = client(h.proxyPort, '/api-first')
  await until(() => proxy.connects() === 1)
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
  t.equal(proxy.connects(), 2, 'a connection for the request whose client was there, and one for the client that came after: none for those that left while queued')
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
