import t from 'tap'
import type { Fault } from '../../dev/token-server.js'
import { build, send, until } from '../helpers/build.js'

// An outage: retried with backoff (TOKEN_RETRY_MIN_MS and up).
const OUTAGES: Array<[string, Fault]> = [
  ['a hang (cut at TOKEN_TIMEOUT_MS)', { hang: true }],
  ['a connection reset', { reset: true }],
  ['a 500 HTML page', { status: 500, body: '<html><h1>Internal Server Error</h1></html>', contentType: 'text/html' }],
  ['a 503 with Retry-After', { status: 503, body: '', headers: { 'retry-after': '0' } }]
]
// A 200 that is no usable token: retried with backoff too, which grows to the
// pace of refused credentials only when it keeps coming (test/token/manager.test.ts).
const UNUSABLE: Array<[string, Fault]> = [
  ['a 200 with expires_in 0', { status: 200, body: '{"access_token":"a.b.c","expires_in":0}' }],
  ['a 200 with a negative expires_in', { status: 200, body: '{"access_token":"a.b.c","expires_in":-300}' }],
  ['a 200 without access_token', { status: 200, body: '{"expires_in":300}' }]
]

// What answers is no token endpoint (a login page): retried at the slow pace (TOKEN_REJECTED_RETRY_MS).
const WRONG_URL: Array<[string, Fault]> = [
  ['a 200 HTML page', { status: 200, body: '<html>login</html>', contentType: 'text/html' }]
]

for (const [name, fault, pace] of [...[...OUTAGES, ...UNUSABLE].map(([n, f]) => [n, f, 'outage'] as const), ...WRONG_URL.map(([n, f]) => [n, f, 'slow'] as const)]) {
  t.test(`auth server answers the start-up grant with ${name}: 503s meanwhile, logged once, retried at the ${pace} pace, recovers`, async (t) => {
    // the faults are queued before the sidecar starts: its first grants meet them
    const h = await build(t, { TOKEN_TIMEOUT_MS: '300', TOKEN_WAIT_MS: '100', TOKEN_RETRY_MIN_MS: '100', TOKEN_RETRY_MAX_MS: '400', TOKEN_REJECTED_RETRY_MS: '1500' }, {}, { faults: [fault, fault, fault] })
    await until(() => h.tokenServer.grants.length >= 1)
    const during = await send(`${h.proxyUrl}/_verify`)
    t.equal(during.status, 503, 'no token: 503, nothing forwarded')
    await until(() => h.app.credential.ready(), 10_000)
    t.equal((await send(`${h.proxyUrl}/_verify`)).status, 200, 'recovered')
    t.ok(h.upstream.received.every((r) => r.tokenValid), 'the upstream never saw a request without a valid token')
    const token = h.log.records().filter((r) => r.component === 'token')
    const warnings = token.filter((r) => (r.level as number) >= 40)
    t.equal(warnings.length, 1, 'one warning for the episode, not one per attempt')
    t.equal(h.tokenServer.grants.length, 4, 'three failures, then the grant')
    const delays = token.filter((r) => typeof r.retryInMs === 'number' && r.msg !== 'token request will be retried').map((r) => r.retryInMs as number)
    t.ok(delays.length === 3 && delays.every((ms) => pace === 'slow' ? ms >= 1_350 : ms <= 400), `retries after ${delays.join(', ')} ms`)
  })
}

t.test('a ten-year token is accepted and not renewed in a loop', async (t) => {
  const h = await build(t, {}, { accessTokenSeconds: 10 * 365 * 86_400 })
  await until(() => h.app.credential.ready())
  await new Promise((resolve) => setTimeout(resolve, 300))
  t.equal(h.tokenServer.grants.length, 1)
  t.equal((await send(`${h.proxyUrl}/_verify`)).status, 200)
})
