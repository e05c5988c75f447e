import { join } from 'node:path'
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { build, harnessEnv, scrapeUntil } from '../helpers/build.js'
import { TestCa } from '../helpers/certificates.js'

const SERIES = 'auth_sidecar_certificate_expiry_timestamp_seconds{certificate="upstream",route="billing"}'

t.test('a route removed by a new configuration takes its certificate\'s expiry series with it', async (t) => {
  const ca = TestCa.create(join(t.testdir({}), 'ca'))
  const client = ca.issue('client', { cn: 'sidecar-billing' })
  const billing = {
    ROUTE_BILLING_BASE_URL: 'https://127.0.0.1:9/billing',
    ROUTE_BILLING_PATH: '/billing',
    ROUTE_BILLING_UPSTREAM_TLS_CERT_FILE: client.certFile,
    ROUTE_BILLING_UPSTREAM_TLS_KEY_FILE: client.keyFile
  }
  const h = await build(t, billing)
  const scrape = async (): Promise<string> => await (await fetch(`${h.adminUrl}/metrics`)).text()
  t.match(await scrape(), SERIES, 'the route\'s certificate is reported')

  const without = loadConfig(harnessEnv(h), { cwd: '/nonexistent' })
  t.match(await h.app.apply(without), { removed: ['billing'] })
  // the route retires once its requests (none) are done: scraped until then
  t.notMatch(await scrapeUntil(h.adminUrl, (text) => !text.includes(SERIES)), SERIES, 'no expiry series is left for the removed route\'s certificate')
})
