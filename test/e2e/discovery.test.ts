import t from 'tap'
import { buildWithIssuer, get, until } from '../helpers/build.js'

t.test('AUTH_ISSUER_URL: the token endpoint from discovery, fetched once for the process\'s life', async (t) => {
  const d = await buildWithIssuer(t)
  await until(() => d.app.credential.ready())
  t.equal(d.tokenServer.discoveries, 1)
  d.tokenServer.revoke(d.app.credential.current()!.header.slice('Bearer '.length))
  t.equal((await get(`${d.proxyUrl}/_verify`)).status, 200)
  t.equal(d.tokenServer.grants.length, 2)
  t.equal(d.tokenServer.discoveries, 1, 'not fetched again for a renewal')
  t.ok(d.log.records().some((r) => r.msg === 'discovered the realm\'s endpoints' && r.tokenUrl === d.tokenServer.tokenUrl))
})

t.test('AUTH_ISSUER_URL: a document naming another issuer is not used; discovery is retried with backoff', async (t) => {
  const d = await buildWithIssuer(t, [{ status: 200, body: JSON.stringify({ issuer: 'https://evil.example/realms/x', token_endpoint: 'https://evil.example/token' }) }])
  await until(() => d.app.credential.ready())
  t.equal(d.tokenServer.discoveries, 2, 'the bad document, then the good one')
  const failure = d.log.records().find((r) => r.event === 'discovery' && r.level === 50)!
  t.match(failure.reason, /names the issuer "https:\/\/evil\.example\/realms\/x", not http/)
  t.equal(d.tokenServer.grants.every((g) => g.status === 200), true, 'no grant went anywhere else')
})

t.test('AUTH_ISSUER_URL: until discovery works the sidecar is not ready, and says why', async (t) => {
  const d = await buildWithIssuer(t, [{ status: 404, body: '{"error":"Realm does not exist"}' }], { TOKEN_RETRY_MIN_MS: '60000', TOKEN_RETRY_MAX_MS: '60000' })
  await until(() => d.tokenServer.discoveries === 1 && d.log.records().some((r) => r.event === 'discovery' && r.outcome === 'error'))
  const ready = await get(`${d.adminUrl}/readyz`)
  t.equal(ready.status, 503)
  t.match(ready.body, /OpenID Connect discovery at http:\/\/127\.0\.0\.1:\d+\/auth\/realms\/service-realm\/\.well-known\/openid-configuration failed/)
  t.equal(d.tokenServer.grants.length, 0)
})

t.test('AUTH_TOKEN_URL wins over discovery for the token endpoint', async (t) => {
  const d = await buildWithIssuer(t, [], { AUTH_TOKEN_URL: 'http://127.0.0.1:9/unused/token' })
  await until(() => d.tokenServer.discoveries === 1 && d.log.records().some((r) => r.msg === 'token request failed'))
  t.equal(d.tokenServer.grants.length, 0, 'the grant went to AUTH_TOKEN_URL, not to the discovered endpoint')
})

