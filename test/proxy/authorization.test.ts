import t from 'tap'
import { build, send, until } from '../helpers/build.js'

function count (raw: string[], name: string): number {
  let n = 0
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === name) n++
  return n
}

t.test('exactly one Authorization header, the sidecar\'s, whatever the client sends', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const attempts: Array<Record<string, string | string[]>> = [
    {},
    { authorization: 'Bearer client-token' },
    { authorization: ['Basic YTpi', 'Bearer x'] },
    { 'proxy-authorization': 'Basic YTpi' },
    { connection: 'authorization' },
    { connection: 'close, Authorization', authorization: 'Bearer mine' },
    { connection: 'x-forwarded-for, x-request-id' } // naming host is refused outright (hostile-input.test.ts)
  ]
  for (const headers of attempts) {
    const res = await send(`${h.proxyUrl}/whoami`, { headers })
    t.equal(res.status, 200, JSON.stringify(headers))
    const got = h.upstream.received.at(-1)!
    t.equal(count(got.rawHeaders, 'authorization'), 1, `one Authorization: ${JSON.stringify(headers)}`)
    t.ok(got.tokenValid, 'and it is the sidecar\'s valid token')
    t.equal(got.headers['proxy-authorization'], undefined)
    t.equal(count(got.rawHeaders, 'x-request-id'), 1)
  }
})

t.test('hop-by-hop headers dropped; Host is the upstream\'s; X-Forwarded-* set; other headers kept', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  await send(`${h.proxyUrl}/h`, {
    headers: {
      host: 'app.local:8080',
      connection: 'keep-alive, x-secret-hop',
      'x-secret-hop': 'drop me',
      'keep-alive': 'timeout=5',
      te: 'trailers',
      'proxy-connection': 'keep-alive',
      upgrade: 'h2c',
      'x-custom': 'kept',
      'x-forwarded-for': '10.0.0.1',
      accept: 'application/json'
    }
  })
  const got = h.upstream.received.at(-1)!.headers
  for (const name of ['x-secret-hop', 'keep-alive', 'te', 'proxy-connection', 'upgrade']) {
    t.equal(got[name], undefined, `${name} dropped`)
  }
  t.equal(got.host, new URL(h.upstream.url).host)
  t.equal(got['x-custom'], 'kept')
  t.equal(got.accept, 'application/json')
  t.equal(got['x-forwarded-for'], '10.0.0.1, 127.0.0.1')
  t.equal(got['x-forwarded-proto'], 'http')
  t.equal(got['x-forwarded-host'], 'app.local:8080')
})

t.test('X-Request-Id is kept or created, sent upstream, returned, and in the log line', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const kept = await send(`${h.proxyUrl}/r`, { headers: { 'x-request-id': 'abc-123' } })
  t.equal(kept.headers['x-request-id'], 'abc-123')
  t.equal(h.upstream.received.at(-1)!.headers['x-request-id'], 'abc-123')

  const created = await send(`${h.proxyUrl}/r`)
  const id = created.headers['x-request-id'] as string
  t.match(id, /^[0-9a-f-]{36}$/)
  t.equal(h.upstream.received.at(-1)!.headers['x-request-id'], id)

  const weird = await send(`${h.proxyUrl}/r`, { headers: { 'x-request-id': 'a b c' } })
  t.not(weird.headers['x-request-id'], 'a b c', 'an id that does not look like one is replaced')

  const lines = h.log.records().filter((r) => r.msg === 'request')
  t.match(lines.find((r) => r.requestId === 'abc-123'), { method: 'GET', path: '/r', status: 200, durationMs: Number })
  t.ok(lines.some((r) => r.requestId === id))
})

t.test('the client never sees the token, and no log line holds a secret', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const res = await send(`${h.proxyUrl}/x`, { headers: { authorization: 'Bearer client-supplied-secret' } })
  const token = h.upstream.received.at(-1)!.headers.authorization!
  t.notMatch(JSON.stringify(res.headers) + res.body, token.slice(7))
  const all = h.log.lines.join('\n')
  t.notMatch(all, token.slice(7))
  t.notMatch(all, 'client-supplied-secret')
  t.notMatch(all, 'service-password')
})

t.test('TRACE is refused, so no upstream can echo the token back', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const res = await send(`${h.proxyUrl}/x`, { method: 'TRACE' })
  t.equal(res.status, 405)
  t.equal(h.upstream.received.length, 0)
})
