import { createHash, randomBytes } from 'node:crypto'
import { request as httpRequest } from 'node:http'
import t from 'tap'
import { build, send, until } from '../helpers/build.js'

t.test('every method, path and query is forwarded under the BASE_URL prefix', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'HEAD', 'PROPFIND', 'REPORT']) {
    const res = await send(`${h.proxyUrl}/v1/items/42?b=2&a=1&a=3&q=%20x`, { method })
    t.equal(res.status, 200, method)
    const got = h.upstream.received.at(-1)!
    t.equal(got.method, method)
    t.equal(got.url, '/api/v1/items/42?b=2&a=1&a=3&q=%20x', `${method}: path joined under /api, query unchanged`)
  }
  const root = await send(`${h.proxyUrl}/`)
  t.equal(root.status, 200)
  t.match(h.upstream.received.at(-1)!.url, /^\/api\/?$/)
})

t.test('legitimate paths pass unchanged: encoded characters, [...slug], trailing slashes, dots inside names', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  for (const path of ['/files/%20a%20b', '/files/[...slug]', '/dir/', '/a/b.c/d..e/f...', '/x%2Fy', '/caf%C3%A9']) {
    const res = await send(h.proxyUrl + path)
    t.equal(res.status, 200, path)
    t.equal(h.upstream.received.at(-1)!.url, `/api${path}`, path)
  }
})

t.test('request and response bodies are streamed both ways, byte for byte', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const body = randomBytes(8 * 1024 * 1024)
  const res = await send(`${h.proxyUrl}/upload`, { method: 'POST', body, headers: { 'content-type': 'application/octet-stream' } })
  t.equal(res.status, 200)
  const got = h.upstream.received.at(-1)!
  t.equal(got.bodyBytes, body.length)
  t.equal(got.bodySha256, createHash('sha256').update(body).digest('hex'))

  // chunked upload, echoed back as it arrives
  const echoed = await new Promise<Buffer>((resolve, reject) => {
    const req = httpRequest(`${h.proxyUrl}/_echo`, { method: 'POST', agent: false }, (r) => {
      const chunks: Buffer[] = []
      r.on('data', (c: Buffer) => chunks.push(c))
      r.on('end', () => resolve(Buffer.concat(chunks)))
    })
    req.on('error', reject)
    for (let i = 0; i < 16; i++) req.write(body.subarray(i * 65536, (i + 1) * 65536))
    req.end()
  })
  t.equal(createHash('sha256').update(echoed).digest('hex'), createHash('sha256').update(body.subarray(0, 16 * 65536)).digest('hex'))

  const big = await send(`${h.proxyUrl}/_bytes/5000000`)
  t.equal(big.status, 200)
  t.equal(big.body.length, 5_000_000)
})

t.test('status, headers and body of the upstream answer are relayed; hop-by-hop headers are not', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const res = await send(`${h.proxyUrl}/_status/418`)
  t.equal(res.status, 418)
  t.equal(res.headers['x-upstream'], 'yes')
  t.equal(res.body, 'status 418')
  const ok = await send(`${h.proxyUrl}/anything`)
  t.same(ok.headers['set-cookie'], ['a=1'])
  t.not(ok.headers['keep-alive'], 'timeout=5', 'the upstream connection\'s keep-alive is not relayed')
})

t.test('upstream redirects are relayed, never followed', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const res = await send(`${h.proxyUrl}/_redirect`)
  t.equal(res.status, 302)
  t.equal(res.headers.location, 'http://127.0.0.2:1/elsewhere')
  t.equal(h.upstream.received.length, 1)
})

t.test('a segment of dots only (/...) is refused, as a dot segment is: some servers read it as a parent', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const res = await send(`${h.proxyUrl}/a/...`)
  t.equal(res.status, 400)
  t.same(JSON.parse(res.body), { error: 'bad_request', message: 'the request target is not allowed' })
  t.equal(h.upstream.received.length, 0)
})
