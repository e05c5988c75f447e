import t from 'tap'
import type { Fault } from '../../dev/token-server.js'
import { build, send, until } from '../helpers/build.js'

const FAULTS: Array<[string, Fault]> = [
  ['a hang (cut at TOKEN_TIMEOUT_MS)', { hang: true }],
  ['a connection reset', { reset: true }],
  ['a 500 HTML page', { status: 500, body: '<html><h1>Internal Server Error</h1></html>', contentType: 'text/html' }],
  ['a 503 with Retry-After', { status: 503, body: '', headers: { 'retry-after': '0' } }],
  ['a 200 HTML page', { status: 200, body: '<html>login</html>', contentType: 'text/html' }],
  ['a 200 with expires_in 0', { status: 200, body: '{"access_token":"a.b.c","expires_in":0}' }],
  ['a 200 with a negative expires_in', { status: 200, body: '{"access_token":"a.b.c","expires_in":-300}' }],
  ['a 200 without access_token', { status: 200, body: '{"expires_in":300}' }]
]

for (const [name, fault] of FAULTS) {
  t.test(`auth server answers the start-up grant with ${name}: 503s meanwhile, logged once, retried, recovers`, async (t) => {
    const h = await build(t, { TOKEN_TIMEOUT_MS: '300', TOKEN_WAIT_MS: '100', TOKEN_RETRY_MIN_MS: '100', TOKEN_RETRY_MAX_MS: '400' })
    h.tokenServer.faults.push(fault, fault, fault)
    await until(() => h.tokenServer.grants.length >= 1)
    const during = await send(`${h.proxyUrl}/_verify`)
    t.equal(during.status, 503, 'no token: 503, nothing forwarded')
    await until(() => h.app.tokens.ready(), 10_000)
    t.equal((await send(`${h.proxyUrl}/_verify`)).status, 200, 'recovered')
    t.ok(h.upstream.received.every((r) => r.tokenValid), 'the upstream never saw a request without a valid token')
    const warnings = h.log.records().filter((r) => r.component === 'token' && ((r.level as number) >= 40))
    t.equal(warnings.length, 1, 'one warning for the episode, not one per attempt')
    t.ok(h.tokenServer.grants.length >= 4, 'retried')
  })
}

t.test('a ten-year token is accepted and not renewed in a loop', async (t) => {
  const h = await build(t, {}, { accessTokenSeconds: 10 * 365 * 86_400 })
  await until(() => h.app.tokens.ready())
  await new Promise((resolve) => setTimeout(resolve, 300))
  t.equal(h.tokenServer.grants.length, 1)
  t.equal((await send(`${h.proxyUrl}/_verify`)).status, 200)
})
