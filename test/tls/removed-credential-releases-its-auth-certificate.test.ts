import { join } from 'node:path'
import t, { type Test } from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { build, harnessEnv, metric, scrapeUntil, until } from '../helpers/build.js'
import { TestCa } from '../helpers/certificates.js'

const SERIES = 'auth_sidecar_certificate_expiry_timestamp_seconds{certificate="auth",route="billing"}'

/** Route billing, whose credential presents a client certificate of its own to the auth server. */
function billingRoute (t: Test): Record<string, string> {
  const ca = TestCa.create(join(t.testdir({}), 'ca'))
  const client = ca.issue('client', { cn: 'sidecar-billing-auth' })
  return {
    ROUTE_BILLING_BASE_URL: 'http://127.0.0.1:9/billing',
    ROUTE_BILLING_PATH: '/billing',
    ROUTE_BILLING_AUTH_TLS_CERT_FILE: client.certFile,
    ROUTE_BILLING_AUTH_TLS_KEY_FILE: client.keyFile
  }
}

t.test('a credential a new configuration leaves out stops watching its auth server certificate, and its expiry series goes', async (t) => {
  const billing = billingRoute(t)
  const h = await build(t, billing)
  const files = h.app.certificates.find((c) => c.which === 'auth' && c.route === 'billing')!.files
  t.equal(files.watching, true, 'watched while the credential is in use')
  t.ok(await metric(h.adminUrl, SERIES) > Date.now() / 1000, 'its expiry is reported')

  const without = loadConfig(harnessEnv(h), { cwd: '/nonexistent' })
  t.match(await h.app.apply(without), { removed: ['billing'] })
  await until(() => !files.watching)
  t.pass('no longer watched once its route retired and the credential stopped')
  t.notMatch(await scrapeUntil(h.adminUrl, (text) => !text.includes(SERIES)), SERIES, 'no expiry series is left for it')
})

t.test('a credential a new configuration makes reports its auth server certificate until a later one leaves it out', async (t) => {
  const h = await build(t)
  const billing = billingRoute(t)
  t.match(await h.app.apply(loadConfig({ ...harnessEnv(h), ...billing }, { cwd: '/nonexistent' })), { added: ['billing'] })
  t.ok(await metric(h.adminUrl, SERIES) > Date.now() / 1000, 'its expiry is reported')
  t.match(await h.app.apply(loadConfig(harnessEnv(h), { cwd: '/nonexistent' })), { removed: ['billing'] })
  t.notMatch(await scrapeUntil(h.adminUrl, (text) => !text.includes(SERIES)), SERIES, 'and goes with it')
})
