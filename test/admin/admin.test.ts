import t from 'tap'
import { build, send, until } from '../helpers/build.js'

t.test('healthz is 200; readyz follows the token; metrics are Prometheus text', async (t) => {
  const h = await build(t, {}, { users: { 'service-user': 'wrong-until-fixed' } })
  t.equal((await send(`${h.adminUrl}/healthz`)).status, 200)
  await until(() => h.tokenServer.grants.length >= 1)
  const notReady = await send(`${h.adminUrl}/readyz`)
  t.equal(notReady.status, 503)
  t.same(JSON.parse(notReady.body), { status: 'not_ready', reason: 'credentials rejected by the auth server (see the log for its reason)' })

  const metrics = await send(`${h.adminUrl}/metrics`)
  t.equal(metrics.status, 200)
  t.match(metrics.headers['content-type'], /^text\/plain; version=0\.0\.4/)
  t.match(metrics.body, /^# TYPE auth_sidecar_ready gauge$/m)
  t.match(metrics.body, /^auth_sidecar_ready 0$/m, 'not ready: 0')
  t.match(metrics.body, /^auth_sidecar_token_expires_in_seconds\{route="default"\} 0$/m, 'no token: 0 s')
  t.match(metrics.body, /^auth_sidecar_token_grants_total\{grant_type="password",outcome="rejected",route="default"\} [1-9]/m, 'the rejection counted')

  h.tokenServer.users['service-user'] = 'service-password-9f8e7d'
  h.app.credential.answered({ header: 'none', prove: undefined }, 401, undefined, undefined) // a no-op: rejected() for an unknown header changes nothing
  t.equal((await send(`${h.adminUrl}/readyz`)).status, 503)
})

t.test('readyz turns 200 with a token; metrics show grants, expiry and requests by status', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const ready = await send(`${h.adminUrl}/readyz`)
  t.equal(ready.status, 200)
  await send(`${h.proxyUrl}/a`)
  await send(`${h.proxyUrl}/_status/404`)
  const metrics = await send(`${h.adminUrl}/metrics`)
  t.equal(metrics.status, 200)
  t.match(metrics.headers['content-type'], /^text\/plain/)
  t.match(metrics.body, /auth_sidecar_token_grants_total\{grant_type="password",outcome="success",route="default"\} 1/)
  t.match(metrics.body, /auth_sidecar_token_expires_in_seconds\{route="default"\} 29\d\.\d+/)
  t.match(metrics.body, /auth_sidecar_proxy_request_duration_seconds_count\{status="200",route="default"\} 1/)
  t.match(metrics.body, /auth_sidecar_proxy_request_duration_seconds_count\{status="404",route="default"\} 1/)
  t.match(metrics.body, /auth_sidecar_ready 1/)
  const token = h.app.credential.current()!.header.slice(7)
  t.notMatch(metrics.body, token)
  t.notMatch(metrics.body, 'service-password')
  t.equal((await send(`${h.adminUrl}/nope`)).status, 404)
})

t.test('readyz turns 503 the moment shutdown begins', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const slow = send(`${h.proxyUrl}/_slow/400`)
  await until(() => h.upstream.received.length === 1)
  const closing = h.app.close(2_000)
  const during = await send(`${h.adminUrl}/readyz`)
  t.equal(during.status, 503)
  t.same(JSON.parse(during.body), { status: 'not_ready', reason: 'shutting down' })
  t.equal((await slow).status, 200, 'the in-flight request finished')
  await closing
})
