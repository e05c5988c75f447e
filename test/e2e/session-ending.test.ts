import t from 'tap'
import { build, buildWithIssuer, CLIENT_SECRET, PASSWORD, until } from '../helpers/build.js'

const CLIENT_CREDENTIALS = { AUTH_GRANT_TYPE: 'client_credentials', AUTH_USERNAME: '', AUTH_PASSWORD: '' }

t.test('on shutdown the session is ended at the end-session endpoint, after the drain', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
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
  await until(() => h.app.credential.ready())
  await h.app.close(2_000)
  t.equal(h.tokenServer.activeSessions(), 1)
  t.same(h.tokenServer.logouts, [])
})

t.test('ending the session never delays the exit beyond TOKEN_TIMEOUT_MS, and is counted', async (t) => {
  const h = await build(t, { TOKEN_TIMEOUT_MS: '300' })
  await until(() => h.app.credential.ready())
  h.tokenServer.faults.push({ hang: true })
  const started = Date.now()
  await h.app.close(10_000)
  const took = Date.now() - started
  t.ok(took < 3_000, `closed in ${took} ms with the end-session endpoint hanging (limit 300 ms, grace 10 s)`)
  t.match(h.log.records().find((r) => r.event === 'logout')!, { outcome: 'error', msg: /session not ended: logout request timed out after 300 ms/ })
  const text = await h.app.metrics.registry.metrics()
  t.match(text, /auth_sidecar_logouts_total\{outcome="error",route="default"\} 1/)
  t.match(text, /auth_sidecar_logouts_total\{outcome="success",route="default"\} 0/)
})

t.test('a grace period of 0: the session is still ended, after the drain', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  await h.app.close(0)
  t.equal(h.tokenServer.logouts.length, 1)
  t.match(h.log.records().find((r) => r.event === 'logout')!, { outcome: 'success' })
})

t.test('client_credentials without a refresh token: revoked at the discovered revocation endpoint', async (t) => {
  const d = await buildWithIssuer(t, [], CLIENT_CREDENTIALS)
  await until(() => d.app.credential.ready())
  const token = d.app.credential.current()!.header.slice('Bearer '.length)
  await d.app.close(2_000)
  t.same(d.tokenServer.logouts.map((l) => [l.endpoint, l.form.token_type_hint, l.status]), [['revoke', 'access_token', 200]])
  t.equal(d.tokenServer.verify(`Bearer ${token}`).ok, false, 'the token no longer works')
})

t.test('a public client in DPoP mode, its refresh token bound: the end-session endpoint refuses it, revocation ends the session', async (t) => {
  const h = await build(t, { AUTH_DPOP: 'true', AUTH_CLIENT_SECRET: '' }, { clients: { 'legacy-app': undefined }, dpop: { required: true } })
  await until(() => h.app.credential.ready())
  await h.app.close(2_000)
  t.same(h.tokenServer.logouts.map((l) => [l.endpoint, l.status, l.form.token_type_hint]), [['logout', 400, undefined], ['revoke', 200, 'refresh_token']])
  t.equal(h.tokenServer.activeSessions(), 0, 'no session left behind')
  t.match(h.log.records().find((r) => r.event === 'logout')!, {
    outcome: 'success',
    msg: /^session ended: the revocation endpoint \S+\/protocol\/openid-connect\/revoke answered 200, after the end-session endpoint \S+\/logout answered 400 invalid_grant \(DPoP proof is missing\)$/
  })
})

t.test('end-session and revocation answers that echo the credentials are scrubbed from the log', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const echo = { status: 400, body: JSON.stringify({ error: 'invalid_request', error_description: `bad form client_secret=${CLIENT_SECRET}&password=${PASSWORD}` }) }
  h.tokenServer.faults.push(echo, echo)
  await h.app.close(2_000)
  t.same(h.tokenServer.logouts.map((l) => l.endpoint), ['logout', 'revoke'])
  const line = h.log.records().find((r) => r.event === 'logout')!
  t.equal(line.outcome, 'rejected')
  t.notMatch(h.log.lines.join('\n'), CLIENT_SECRET)
  t.notMatch(h.log.lines.join('\n'), PASSWORD)
})
