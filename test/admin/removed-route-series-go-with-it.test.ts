import { join } from 'node:path'
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import type { Harness } from '../helpers/build.js'
import { build, harnessEnv, metric, scrapeUntil, until } from '../helpers/build.js'
import { TestCa } from '../helpers/certificates.js'

const ERRORS = 'auth_sidecar_upstream_errors_total{reason="unreachable",route="billing"}'
const FAILED = 'auth_sidecar_proxy_request_duration_seconds_count{status="502",route="billing"}'
const ANSWERED = 'auth_sidecar_proxy_request_duration_seconds_count{status="200",route="billing"}'
const GRANTS = 'auth_sidecar_token_grants_total{grant_type="password",outcome="success",route="billing"}'
const LOGOUTS = 'auth_sidecar_logouts_total{outcome="success",route="billing"}'

/** Whether route billing's credential of now has ended its session (it does once no route holds it). */
function sessionEnded (h: Harness): () => boolean {
  let ended = false
  h.app.routes.find((route) => route.name === 'billing')!.credential.events.once('logout', () => { ended = true })
  return () => ended
}

t.test('a route\'s series keep counting when it changes, and go with it when a new configuration removes it', async (t) => {
  // billing has a credential of its own (its scope), and an upstream that refuses connections
  const billing = { ROUTE_BILLING_BASE_URL: 'http://127.0.0.1:9/billing', ROUTE_BILLING_PATH: '/billing', ROUTE_BILLING_AUTH_SCOPE: 'billing' }
  const h = await build(t, billing)
  await until(() => h.tokenServer.grants.length === 2)
  t.equal((await fetch(`${h.proxyUrl}/billing/invoices`)).status, 502)
  t.equal(await metric(h.adminUrl, ERRORS), 1, 'the route\'s failure is counted')
  t.equal(await metric(h.adminUrl, FAILED), 1)
  t.equal(await metric(h.adminUrl, GRANTS), 1, 'and its credential\'s grant')

  // changed: another upstream and another credential, the same name
  const changed = loadConfig({ ...harnessEnv(h), ...billing, ROUTE_BILLING_BASE_URL: `${h.upstream.url}/billing`, ROUTE_BILLING_AUTH_SCOPE: 'billing invoices' }, { cwd: '/nonexistent' })
  const replaced = sessionEnded(h)
  t.match(await h.app.apply(changed), { changed: ['billing'] })
  // the route it replaced has retired once its credential, which no route holds any more, ended its session
  await until(replaced)
  t.equal((await fetch(`${h.proxyUrl}/billing/invoices`)).status, 200)
  t.equal(await metric(h.adminUrl, ERRORS), 1, 'the failure counted before the change is still there')
  t.equal(await metric(h.adminUrl, FAILED), 1)
  t.equal(await metric(h.adminUrl, ANSWERED), 1, 'and the new version\'s answers add to the same name')
  t.equal(await metric(h.adminUrl, GRANTS), 2, 'its new credential\'s grant too')
  t.equal(await metric(h.adminUrl, LOGOUTS), 1, 'the replaced credential\'s session end counted under it')

  const without = loadConfig(harnessEnv(h), { cwd: '/nonexistent' })
  const removed = sessionEnded(h)
  t.match(await h.app.apply(without), { removed: ['billing'] })
  // the removed route retires once its requests (none) are done, and its credential ends its session after
  await until(removed)
  const text = await scrapeUntil(h.adminUrl, (text) => !text.includes('route="billing"'))
  t.notMatch(text, 'route="billing"', 'no series is left with the removed route\'s name')
  t.match(text, 'auth_sidecar_upstream_errors_total{reason="unreachable",route="default"} 0', 'the default route\'s are still there')
  t.match(text, 'auth_sidecar_token_grants_total{grant_type="password",outcome="success",route="default"} 1')
})

t.test('a removed route whose name labels a credential another route still holds leaves that credential\'s series until it goes', async (t) => {
  // billing's settings define the credential orders shares; its client certificate tells when it has retired
  const ca = TestCa.create(join(t.testdir({}), 'ca'))
  const client = ca.issue('client', { cn: 'sidecar-billing' })
  const billing = {
    ROUTE_BILLING_BASE_URL: 'https://127.0.0.1:9/billing',
    ROUTE_BILLING_PATH: '/billing',
    ROUTE_BILLING_AUTH_SCOPE: 'billing',
    ROUTE_BILLING_UPSTREAM_TLS_CERT_FILE: client.certFile,
    ROUTE_BILLING_UPSTREAM_TLS_KEY_FILE: client.keyFile
  }
  const orders = { ROUTE_ORDERS_BASE_URL: 'http://127.0.0.1:9/orders', ROUTE_ORDERS_PATH: '/orders', ROUTE_ORDERS_AUTH_SCOPE: 'billing' }
  const h = await build(t, { ...billing, ...orders })
  await until(() => h.tokenServer.grants.length === 2)
  t.equal(await metric(h.adminUrl, GRANTS), 1, 'one grant for both, under billing')
  const files = h.app.routes.find((route) => route.name === 'billing')!.certificate!.files

  const ended = sessionEnded(h)
  t.match(await h.app.apply(loadConfig({ ...harnessEnv(h), ...orders }, { cwd: '/nonexistent' })), { removed: ['billing'] })
  await until(() => !files.watching)
  t.equal(await metric(h.adminUrl, GRANTS), 1, 'once billing has retired, the credential orders holds keeps its series')
  t.equal(await metric(h.adminUrl, 'auth_sidecar_token_grants_total{grant_type="refresh_token",outcome="error",route="billing"}'), 0, 'each of them')

  t.match(await h.app.apply(loadConfig(harnessEnv(h), { cwd: '/nonexistent' })), { removed: ['orders'] })
  await until(ended)
  const text = await scrapeUntil(h.adminUrl, (text) => !/route="(billing|orders)"/.test(text))
  t.notMatch(text, /route="(billing|orders)"/, 'with the last route holding it, the credential\'s series go, and orders\' own')
})
