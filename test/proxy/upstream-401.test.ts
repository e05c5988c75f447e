import t from 'tap'
import { build, send, until } from '../helpers/build.js'

t.test('a rejected token is renewed once and a request without a body is replayed', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const old = h.app.credential.current()!.header
  h.upstream.rejectTokens.add(old)
  const res = await send(`${h.proxyUrl}/data?x=1`)
  t.equal(res.status, 200, 'the client sees the replay\'s answer')
  t.same(JSON.parse(res.body), { method: 'GET', url: '/api/data?x=1', bodyBytes: 0 })
  t.equal(res.headers['www-authenticate'], undefined, 'no header of the 401 leaks into the answer')
  const [first, second] = h.upstream.received.slice(-2)
  t.equal(first!.headers.authorization, old)
  t.not(second!.headers.authorization, old)
  t.ok(second!.tokenValid)
  t.same(h.tokenServer.grants.map((g) => g.grantType), ['password', 'refresh_token'], 'renewed by the refresh grant')
})

t.test('many requests seeing the same rejected token cause one renewal', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const old = h.app.credential.current()!.header
  h.upstream.rejectTokens.add(old)
  const replies = await Promise.all(Array.from({ length: 20 }, async () => await send(`${h.proxyUrl}/many`)))
  t.same(replies.map((r) => r.status), Array(20).fill(200))
  t.equal(h.tokenServer.grants.length, 2, 'one password grant at start, one renewal')
})

t.test('a request with a body gets the 401 relayed, and the token is still renewed', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const old = h.app.credential.current()!.header
  h.upstream.rejectTokens.add(old)
  const res = await send(`${h.proxyUrl}/post`, { method: 'POST', body: '{"a":1}', headers: { 'content-type': 'application/json' } })
  t.equal(res.status, 401)
  t.equal(res.body, '{"error":"invalid_token"}')
  t.equal(h.upstream.received.length, 1, 'not replayed')
  await until(() => h.app.credential.ready())
  t.not(h.app.credential.current()?.header, old)
  const next = await send(`${h.proxyUrl}/post`, { method: 'POST', body: '{"a":1}', headers: { 'content-type': 'application/json' } })
  t.equal(next.status, 200)
})

t.test('a replay that is rejected again is relayed as 401, not retried in a loop', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const res = await send(`${h.proxyUrl}/_status/401`)
  t.equal(res.status, 401)
  t.equal(h.upstream.received.length, 2, 'sent once, replayed once')
  await new Promise((resolve) => setTimeout(resolve, 300))
  // the first token renewed at once; the replay's token, rejected with no
  // other answer in between, is kept: the next 401-caused renewal backs off
  t.equal(h.tokenServer.grants.length, 2, 'one renewal, not a loop')
})

t.test('the upstream never receives an invalid token when the session is ended server-side', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  h.tokenServer.revoke(h.app.credential.current()!.header.slice(7))
  h.tokenServer.endSessions()
  const res = await send(`${h.proxyUrl}/_verify`)
  t.equal(res.status, 200, 'refresh refused (Session not active), password grant, replay')
  t.same(h.tokenServer.grants.map((g) => [g.grantType, g.status]), [['password', 200], ['refresh_token', 400], ['password', 200]])
})

t.test('an upstream that rejects every token: 401-caused renewals back off (0, 1 s, 2 s ...), the 401 relayed meanwhile', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  // 4 clients for 2.5 s against an upstream that answers 401 to everything
  const deadline = Date.now() + 2_500
  const statuses = new Map<number, number>()
  await Promise.all(Array.from({ length: 4 }, async () => {
    while (Date.now() < deadline) {
      const res = await send(`${h.proxyUrl}/_status/401`)
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1)
    }
  }))
  t.same([...statuses.keys()], [401], 'every answer is the relayed 401')
  // at start, then renewals at about 0, 1 and 3 s: not one per request
  t.ok(h.tokenServer.grants.length <= 4, `${h.tokenServer.grants.length} grants for ${statuses.get(401)} requests`)
  t.ok(h.app.credential.ready(), 'the current token is kept meanwhile')
  // another answer does not end the back-off
  t.equal((await send(`${h.proxyUrl}/fine`)).status, 200)
  const before = h.tokenServer.grants.length
  t.equal((await send(`${h.proxyUrl}/_status/401`)).status, 401)
  t.equal(h.tokenServer.grants.length, before, 'still backing off after a 200: no grant')
})

t.test('a client alternating a path answered 401 with one answered 200 cannot drive renewals: they back off all the same', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const deadline = Date.now() + 3_000
  let requests = 0
  await Promise.all(Array.from({ length: 2 }, async () => {
    while (Date.now() < deadline) {
      await send(`${h.proxyUrl}/_status/401`)
      await send(`${h.proxyUrl}/fine`)
      requests += 2
    }
  }))
  // the grant at start, then renewals at about 0, 1 and 3 s
  t.ok(h.tokenServer.grants.length <= 4, `${h.tokenServer.grants.length} grants for ${requests} requests`)
})

t.test('the first 401 of a token obtained on schedule renews it at once, and the request is replayed', async (t) => {
  const h = await build(t, {}, { accessTokenSeconds: 4 })
  await until(() => h.app.credential.ready())
  // a 401 now, then a renewal on schedule (after half the 4 s lifetime)
  h.upstream.rejectTokens.add(h.app.credential.current()!.header)
  t.equal((await send(`${h.proxyUrl}/data`)).status, 200)
  const replaced = h.app.credential.current()!.header
  await until(() => h.tokenServer.grants.length === 3 && h.app.credential.current()?.header !== replaced, 4_000)
  h.upstream.rejectTokens.add(h.app.credential.current()!.header)
  t.equal((await send(`${h.proxyUrl}/data`)).status, 200, 'renewed at once and replayed, though the last 401 was a second ago')
  t.equal(h.tokenServer.grants.length, 4)
})

t.test('a 401 that says the token lacks a scope is relayed, and nothing renewed', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const res = await send(`${h.proxyUrl}/_scope`)
  t.equal(res.status, 401)
  t.match(res.headers['www-authenticate'], /insufficient_scope/)
  t.equal(h.tokenServer.grants.length, 1, 'no renewal')
  t.equal(h.upstream.received.length, 1, 'not replayed')
})
