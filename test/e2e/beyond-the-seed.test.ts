import t, { type Test } from 'tap'
import type { Fault } from '../../src/dev/token-server.js'
import { build, CLIENT_SECRET, PASSWORD, until } from '../helpers/build.js'

// SPEC §9 against the development token server answering as Keycloak does.

async function get (url: string): Promise<{ status: number, body: string }> {
  const res = await fetch(url)
  return { status: res.status, body: await res.text() }
}

async function metric (adminUrl: string, line: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text()
  const found = text.split('\n').find((l) => l.startsWith(line + ' '))
  return found === undefined ? NaN : Number(found.slice(line.length + 1))
}

const CLIENT_CREDENTIALS = { AUTH_GRANT_TYPE: 'client_credentials', AUTH_USERNAME: '', AUTH_PASSWORD: '' }

t.test('client_credentials: a service account without a user; renewal is a new client_credentials grant', async (t) => {
  const h = await build(t, CLIENT_CREDENTIALS)
  await until(() => h.app.tokens.ready())
  const first = h.tokenServer.grants[0]!
  t.equal(first.grantType, 'client_credentials')
  t.equal(first.form.client_id, 'legacy-app')
  t.equal(first.form.client_secret, CLIENT_SECRET)
  t.notOk('username' in first.form || 'password' in first.form, 'no user credentials are sent')
  t.equal((await get(`${h.proxyUrl}/_verify`)).status, 200, 'the token is accepted upstream')

  // Keycloak issues no refresh token here: a rejected token is replaced by a new grant
  h.tokenServer.revoke(h.app.tokens.current()!.slice('Bearer '.length))
  t.equal((await get(`${h.proxyUrl}/_verify`)).status, 200, 'renewed and replayed')
  t.same(h.tokenServer.grants.map((g) => g.grantType), ['client_credentials', 'client_credentials'])
  t.equal(await metric(h.adminUrl, 'auth_sidecar_token_grants_total{grant_type="client_credentials",outcome="success"}'), 2)
})

t.test('client_credentials: a refresh token, when one is issued, is used as for the password grant', async (t) => {
  const h = await build(t, CLIENT_CREDENTIALS, { clientCredentialsRefresh: true })
  await until(() => h.app.tokens.ready())
  h.tokenServer.revoke(h.app.tokens.current()!.slice('Bearer '.length))
  t.equal((await get(`${h.proxyUrl}/_verify`)).status, 200)
  t.same(h.tokenServer.grants.map((g) => g.grantType), ['client_credentials', 'refresh_token'])
})

t.test('client_credentials: Keycloak\'s refusals are configuration errors, said plainly', async (t) => {
  const publicClient = await build(t, CLIENT_CREDENTIALS, { clients: { 'legacy-app': undefined } })
  await until(() => publicClient.log.lines.some((l) => l.includes('unauthorized_client')))
  const line = publicClient.log.records().find((r) => r.outcome === 'rejected')!
  t.equal(line.level, 50, 'logged at error level')
  t.match(line.reason, /401 unauthorized_client \(Public client not allowed to retrieve service account\): the client is public; client_credentials needs a confidential client/)
  t.equal(publicClient.tokenServer.grants.length, 1, 'retried slowly, not at once')
  t.match((await get(`${publicClient.adminUrl}/readyz`)).body, /refused|rejected/)

  const disabled = await build(t, CLIENT_CREDENTIALS, { serviceAccounts: false })
  await until(() => disabled.log.lines.some((l) => l.includes('unauthorized_client')))
  t.match(disabled.log.records().find((r) => r.outcome === 'rejected')!.reason, /400 unauthorized_client \(Client not enabled to retrieve service account\): turn on "Service accounts roles"/)
})

t.test('client_secret_basic: the client id and secret form-encoded and Base64\'d in a header, not in the form', async (t) => {
  const secret = 'a:b+c%/ é&='
  const h = await build(t, { AUTH_CLIENT_AUTH: 'client_secret_basic', AUTH_CLIENT_SECRET: secret }, { clients: { 'legacy-app': secret } })
  await until(() => h.app.tokens.ready())
  const first = h.tokenServer.grants[0]!
  t.equal(first.status, 200, 'the server decoded the header to the right client and secret')
  t.equal(first.clientAuth, 'basic')
  t.notOk('client_id' in first.form || 'client_secret' in first.form)
  // the refresh grant authenticates the same way
  h.tokenServer.revoke(h.app.tokens.current()!.slice('Bearer '.length))
  t.equal((await get(`${h.proxyUrl}/_verify`)).status, 200)
  t.same(h.tokenServer.grants.map((g) => [g.grantType, g.clientAuth, g.status]), [['password', 'basic', 200], ['refresh_token', 'basic', 200]])
})

t.test('client_secret_basic: a token server echoing the Authorization header has it scrubbed from the log', async (t) => {
  const secret = 'basic-secret-0f9e8d'
  const header = Buffer.from(`legacy-app:${secret}`).toString('base64')
  const h = await build(t, { AUTH_CLIENT_AUTH: 'client_secret_basic', AUTH_CLIENT_SECRET: secret }, { clients: { 'legacy-app': secret } }, {
    faults: [{ status: 503, body: JSON.stringify({ error: 'temporarily_unavailable', error_description: `saw Authorization: Basic ${header}` }) }]
  })
  await until(() => h.app.tokens.ready())
  t.match(h.log.lines.join('\n'), /saw Authorization: Basic \[redacted\]/, 'the failure was logged, scrubbed')
  t.notMatch(h.log.lines.join('\n'), header)
  t.notMatch(h.log.lines.join('\n'), secret)
})

t.test('AUTH_TOKEN_PARAMS: sent with every grant, decoded, repeated names kept', async (t) => {
  const h = await build(t, { AUTH_TOKEN_PARAMS: 'audience=orders-api&resource=https%3A%2F%2Fa.example&resource=https%3A%2F%2Fb.example' })
  await until(() => h.app.tokens.ready())
  h.tokenServer.revoke(h.app.tokens.current()!.slice('Bearer '.length))
  t.equal((await get(`${h.proxyUrl}/_verify`)).status, 200)
  t.equal(h.tokenServer.grants.length, 2)
  for (const g of h.tokenServer.grants) {
    t.same(g.params.filter(([n]) => n === 'audience' || n === 'resource'), [
      ['audience', 'orders-api'], ['resource', 'https://a.example'], ['resource', 'https://b.example']
    ], `${g.grantType} grant`)
    t.equal(g.form.grant_type, g.grantType, 'the sidecar\'s own fields are untouched')
  }
})

t.test('AUTH_ISSUER_URL: the token endpoint from discovery, fetched once for the process\'s life', async (t) => {
  const d = await buildWithIssuer(t)
  await until(() => d.app.tokens.ready())
  t.equal(d.tokenServer.discoveries, 1)
  d.tokenServer.revoke(d.app.tokens.current()!.slice('Bearer '.length))
  t.equal((await get(`${d.proxyUrl}/_verify`)).status, 200)
  t.equal(d.tokenServer.grants.length, 2)
  t.equal(d.tokenServer.discoveries, 1, 'not fetched again for a renewal')
  t.ok(d.log.records().some((r) => r.msg === 'discovered the realm\'s endpoints' && r.tokenUrl === d.tokenServer.tokenUrl))
})

t.test('AUTH_ISSUER_URL: a document naming another issuer is not used; discovery is retried with backoff', async (t) => {
  const d = await buildWithIssuer(t, [{ status: 200, body: JSON.stringify({ issuer: 'https://evil.example/realms/x', token_endpoint: 'https://evil.example/token' }) }])
  await until(() => d.app.tokens.ready())
  t.equal(d.tokenServer.discoveries, 2, 'the bad document, then the good one')
  const failure = d.log.records().find((r) => r.event === 'discovery' && r.level === 50)!
  t.match(failure.reason, /names the issuer "https:\/\/evil\.example\/realms\/x", not http/)
  t.equal(d.tokenServer.grants.every((g) => g.status === 200), true, 'no grant went anywhere else')
})

t.test('AUTH_ISSUER_URL: until discovery works the sidecar is not ready, and says why', async (t) => {
  const d = await buildWithIssuer(t, [{ status: 404, body: '{"error":"Realm does not exist"}' }], { TOKEN_RETRY_MIN_MS: '60000', TOKEN_RETRY_MAX_MS: '60000' })
  await until(() => d.tokenServer.discoveries === 1 && d.log.records().some((r) => r.event === 'discovery'))
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

/** A sidecar whose endpoints come from discovery, with `faults` queued before it starts. */
function buildWithIssuer (t: Test, faults: Fault[] = [], env: Record<string, string> = {}) {
  return build(t, { AUTH_URL: '', AUTH_ISSUER_URL: '{issuer}', ...env }, {}, { faults })
}

t.test('on shutdown the session is ended at the end-session endpoint, after the drain', async (t) => {
  const h = await build(t)
  await until(() => h.app.tokens.ready())
  t.equal(h.tokenServer.activeSessions(), 1)
  await h.app.close(2_000)
  t.equal(h.tokenServer.activeSessions(), 0, 'no session left behind')
  const call = h.tokenServer.logouts[0]!
  t.equal(call.endpoint, 'logout')
  t.equal(call.status, 204)
  t.equal(call.form.client_id, 'legacy-app')
  t.equal(call.form.client_secret, CLIENT_SECRET)
  t.type(call.form.refresh_token, 'string')
  const line = h.log.records().find((r) => r.event === 'logout')!
  t.equal(line.outcome, 'success')
  t.match(line.msg, /session ended: the end-session endpoint http:\/\/127\.0\.0\.1:\d+\/auth\/realms\/service-realm\/protocol\/openid-connect\/logout answered 204/)
  t.notMatch(h.log.lines.join('\n'), call.form.refresh_token!, 'the refresh token is not logged')
})

t.test('AUTH_LOGOUT_ON_SHUTDOWN=false leaves the session to Keycloak', async (t) => {
  const h = await build(t, { AUTH_LOGOUT_ON_SHUTDOWN: 'false' })
  await until(() => h.app.tokens.ready())
  await h.app.close(2_000)
  t.equal(h.tokenServer.activeSessions(), 1)
  t.same(h.tokenServer.logouts, [])
})

t.test('ending the session never delays the exit beyond TOKEN_TIMEOUT_MS, and is counted', async (t) => {
  const h = await build(t, { TOKEN_TIMEOUT_MS: '300' })
  await until(() => h.app.tokens.ready())
  h.tokenServer.faults.push({ hang: true })
  const started = Date.now()
  await h.app.close(10_000)
  const took = Date.now() - started
  t.ok(took < 3_000, `closed in ${took} ms with the end-session endpoint hanging (limit 300 ms, grace 10 s)`)
  t.match(h.log.records().find((r) => r.event === 'logout')!, { outcome: 'error', msg: /session not ended: logout request timed out after 300 ms/ })
  const text = await h.app.metrics.registry.metrics()
  t.match(text, /auth_sidecar_logouts_total\{outcome="error"\} 1/)
  t.match(text, /auth_sidecar_logouts_total\{outcome="success"\} 0/)
})

t.test('no time left in the grace period: the session is left, the exit is not delayed', async (t) => {
  const h = await build(t)
  await until(() => h.app.tokens.ready())
  await h.app.close(0)
  t.same(h.tokenServer.logouts, [])
  t.match(h.log.records().find((r) => r.event === 'logout')!, { outcome: 'skipped', msg: /no time left in the shutdown grace period/ })
})

t.test('client_credentials without a refresh token: revoked at the discovered revocation endpoint', async (t) => {
  const d = await buildWithIssuer(t, [], CLIENT_CREDENTIALS)
  await until(() => d.app.tokens.ready())
  const token = d.app.tokens.current()!.slice('Bearer '.length)
  await d.app.close(2_000)
  t.same(d.tokenServer.logouts.map((l) => [l.endpoint, l.form.token_type_hint, l.status]), [['revoke', 'access_token', 200]])
  t.equal(d.tokenServer.verify(`Bearer ${token}`).ok, false, 'the token no longer works')
})

t.test('an end-session answer that echoes the credentials is scrubbed from the log', async (t) => {
  const h = await build(t)
  await until(() => h.app.tokens.ready())
  h.tokenServer.faults.push({ status: 400, body: JSON.stringify({ error: 'invalid_request', error_description: `bad form client_secret=${CLIENT_SECRET}&password=${PASSWORD}` }) })
  await h.app.close(2_000)
  const line = h.log.records().find((r) => r.event === 'logout')!
  t.equal(line.outcome, 'rejected')
  t.notMatch(h.log.lines.join('\n'), CLIENT_SECRET)
  t.notMatch(h.log.lines.join('\n'), PASSWORD)
})
