import { request as httpRequest } from 'node:http'
import t from 'tap'
import { build, rawRequest, send, statusOf, until } from '../helpers/build.js'

const accessLines = (h: Awaited<ReturnType<typeof build>>): Array<Record<string, unknown>> =>
  h.log.records().filter((r) => r.msg === 'request')

t.test('a request the client abandons still gets its access-log line, as 499', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  await new Promise<void>((resolve) => {
    const req = httpRequest(`${h.proxyUrl}/_slow/2000`, { agent: false })
    req.on('error', () => resolve())
    req.end()
    setTimeout(() => { req.destroy(); resolve() }, 200)
  })
  await until(() => accessLines(h).length === 1)
  t.match(accessLines(h)[0], { method: 'GET', path: '/_slow/2000', status: 499 })
})

t.test('targets Fastify\'s router cannot decode get the sidecar\'s JSON 400, not Fastify\'s', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const raw = await rawRequest(h.proxyPort, 'GET /a%zz%c0 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
  t.equal(statusOf(raw), 400)
  t.match(raw, /\{"error":"bad_request","message":"the request target is not allowed"\}/)
  t.equal(h.upstream.received.length, 0)
})

t.test('refusals and the sidecar\'s own errors get an access-log line and a metric like any answer', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  t.equal((await send(`${h.proxyUrl}/x`, { method: 'TRACE' })).status, 405)
  const raw = await rawRequest(h.proxyPort, 'GET //evil/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
  t.equal(statusOf(raw), 400)
  await until(() => accessLines(h).length === 2)
  t.same(accessLines(h).map((l) => l.status), [405, 400])
  const metrics = await send(`${h.adminUrl}/metrics`)
  t.match(metrics.body, /auth_sidecar_proxy_request_duration_seconds_count\{status="400",route="default"\} 1/)
  t.match(metrics.body, /auth_sidecar_proxy_request_duration_seconds_count\{status="405",route="default"\} 1/)
})

t.test('a GET that carries a body: Fastify does not read it, so none is announced upstream', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const res = await send(`${h.proxyUrl}/with-body`, { method: 'GET', body: 'ignored', headers: { 'content-type': 'text/plain', 'content-length': '7' } })
  t.equal(res.status, 200)
  const got = h.upstream.received.at(-1)!
  t.equal(got.headers['content-length'], undefined)
  t.equal(got.bodyBytes, 0)
  t.equal((await send(`${h.proxyUrl}/after`)).status, 200)
})

t.test('HEAD is forwarded as HEAD and answered without a body', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const res = await send(`${h.proxyUrl}/_bytes/1000`, { method: 'HEAD' })
  t.equal(res.status, 200)
  t.equal(res.body, '')
  t.equal(h.upstream.received.at(-1)!.method, 'HEAD')
})

t.test('no line of Fastify\'s or reply-from\'s own request logging, one line of the sidecar\'s per request', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  for (let i = 0; i < 5; i++) await send(`${h.proxyUrl}/n${i}`)
  await until(() => accessLines(h).length === 5)
  const msgs = h.log.records().map((r) => r.msg)
  t.notOk(msgs.some((m) => m === 'incoming request' || m === 'request completed' || m === 'fetching from remote server' || m === 'response received'))
})

t.test('each route\'s requests meet each hook once: the access log, the route\'s lookup, admission, the guard, then the credential', async (t) => {
  const h = await build(t, { ROUTE_BILLING_BASE_URL: 'http://127.0.0.1:9/billing', ROUTE_BILLING_PATH: '/billing' })
  // Fastify's own listing of its routes and the onRequest hooks their requests run through:
  // one route for every path, the sidecar's routes being a table it looks up
  const listing = h.app.proxy.printRoutes({ includeHooks: true, commonPrefix: false })
  const onRequest = [...listing.matchAll(/\(onRequest\) (\[.*\])/g)].map((m) => (JSON.parse(m[1]!) as string[]).length)
  t.ok(onRequest.length >= 2, `${onRequest.length} Fastify routes listed, / and /*, whichever route a request is for`)
  t.same([...new Set(onRequest)], [5], 'five hooks on each, none twice')
})
