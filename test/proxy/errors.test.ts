import { createServer } from 'node:net'
import t from 'tap'
import { build, send, until } from '../helpers/build.js'

const json = (body: string): unknown => JSON.parse(body)

t.test('no token to be had: 503 token_unavailable with Retry-After, nothing forwarded', async (t) => {
  const h = await build(t, { TOKEN_WAIT_MS: '200' }, { users: { 'service-user': 'another-password' } })
  await until(() => h.tokenServer.grants.length >= 1)
  const res = await send(`${h.proxyUrl}/x`)
  t.equal(res.status, 503)
  t.same(json(res.body), { error: 'token_unavailable', message: 'no valid access token is available; retry later' })
  t.match(res.headers['retry-after'], /^\d+$/)
  t.ok(Number(res.headers['retry-after']) >= 1)
  t.equal(h.upstream.received.length, 0, 'not forwarded')
  t.equal(h.tokenServer.grants.length, 1, 'the request caused no extra grant (credentials rejected: slow retry)')
  const errors = h.log.records().filter((r) => r.level === 50 && r.component === 'token')
  t.match(errors[0], { grant: 'password', outcome: 'rejected', reason: /400 invalid_grant \(Invalid user credentials\)/ })
})

t.test('a slow auth server: requests wait for the grant in flight (bounded), then go out', async (t) => {
  const h = await build(t, { TOKEN_WAIT_MS: '3000' })
  await until(() => h.app.credential.ready())
  h.tokenServer.faults.push({ delayMs: 300 })
  h.app.credential.answered(h.app.credential.current()!, 401, undefined, undefined) // force a renewal now
  const replies = await Promise.all(Array.from({ length: 20 }, async () => await send(`${h.proxyUrl}/w`)))
  t.same(replies.map((r) => r.status), Array(20).fill(200))
  t.ok(h.upstream.received.every((r) => r.tokenValid))
  t.equal(h.tokenServer.grants.length, 2, 'one grant for all twenty')
})

t.test('upstream refused: 502 upstream_unreachable, no internal detail', async (t) => {
  const port = await new Promise<number>((resolve) => {
    const s = createServer()
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port
      s.close(() => resolve(p))
    })
  })
  const h = await build(t, { BASE_URL: `http://127.0.0.1:${port}/api` })
  await until(() => h.app.credential.ready())
  const res = await send(`${h.proxyUrl}/x`)
  t.equal(res.status, 502)
  t.equal(res.headers['content-type'], 'application/json; charset=utf-8')
  t.same(json(res.body), { error: 'upstream_unreachable', message: 'the upstream could not be reached or closed the connection' })
  t.notMatch(res.body, /ECONNREFUSED|127\.0\.0\.1/)
})

t.test('upstream resets the connection: 502', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const res = await send(`${h.proxyUrl}/_reset`, { method: 'POST', body: 'x' })
  t.equal(res.status, 502)
  t.match(json(res.body), { error: 'upstream_unreachable' })
})

t.test('upstream too slow with its headers: 504 upstream_timeout after UPSTREAM_TIMEOUT_MS', async (t) => {
  const h = await build(t, { UPSTREAM_TIMEOUT_MS: '300' })
  await until(() => h.app.credential.ready())
  const started = Date.now()
  const res = await send(`${h.proxyUrl}/_slow/2000`)
  t.equal(res.status, 504)
  t.same(json(res.body), { error: 'upstream_timeout', message: 'the upstream did not answer in time' })
  t.ok(Date.now() - started < 1900, 'did not wait for the upstream')
  const ok = await send(`${h.proxyUrl}/_slow/50`)
  t.equal(ok.status, 200, 'a fast enough answer passes')
})

t.test('upstream failures are logged once, as the sidecar\'s own line, without a stack trace', async (t) => {
  const h = await build(t, { BASE_URL: 'http://127.0.0.1:1/api' })
  await until(() => h.app.credential.ready())
  t.equal((await send(`${h.proxyUrl}/x`)).status, 502)
  const warnings = h.log.records().filter((r) => (r.level as number) >= 40)
  t.same(warnings.map((r) => [r.msg, r.upstreamError]), [['upstream request failed', 'ECONNREFUSED']])
  t.notMatch(h.log.lines.join('\n'), /"stack"|\\n\s+at /)
})
