import { join } from 'node:path'
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { TlsFileSets } from '../../src/tls/files.js'
import { build, harnessEnv, until } from '../helpers/build.js'
import { TestCa } from '../helpers/certificates.js'
import { captureLogger } from '../helpers/log.js'

t.test('a TLS file set is unwatched once its last user releases it, across many versions', async (t) => {
  const ca = TestCa.create(join(t.testdir({}), 'ca'))
  const client = ca.issue('client', { cn: 'sidecar' })
  const paths = { certFile: client.certFile, keyFile: client.keyFile, names: { cert: 'UPSTREAM_TLS_CERT_FILE', key: 'UPSTREAM_TLS_KEY_FILE', ca: 'UPSTREAM_TLS_CA_FILE' } }
  const sets = new TlsFileSets(captureLogger().logger)
  t.teardown(async () => await sets.close())
  const kept = await sets.of(paths, 'upstream')
  await sets.watch()
  for (let version = 0; version < 20; version++) {
    // a route made with the same files, and the one it replaced retiring
    const made = await sets.of(paths, 'upstream (route billing)')
    await sets.watch()
    sets.release(made)
  }
  t.equal(sets.size, 1, 'the set is held while a user is left')
  t.equal(kept.watching, true)
  sets.release(kept)
  t.equal(sets.size, 0, 'and let go with the last')
  t.equal(kept.watching, false, 'its files no longer watched')
})

t.test('a route removed by a new configuration stops watching its TLS files once it retires', async (t) => {
  const ca = TestCa.create(join(t.testdir({}), 'ca'))
  const client = ca.issue('client', { cn: 'sidecar-billing' })
  const h = await build(t, {
    ROUTE_BILLING_BASE_URL: 'https://127.0.0.1:9/billing',
    ROUTE_BILLING_PATH: '/billing',
    ROUTE_BILLING_UPSTREAM_TLS_CERT_FILE: client.certFile,
    ROUTE_BILLING_UPSTREAM_TLS_KEY_FILE: client.keyFile
  })
  const files = h.app.routes.find((route) => route.name === 'billing')!.certificate!.files
  t.equal(files.watching, true, 'watched while the route is in use')
  const without = loadConfig(harnessEnv(h), { cwd: '/nonexistent' })
  t.match(await h.app.apply(without), { removed: ['billing'] })
  await until(() => !files.watching)
  t.pass('no longer watched once the route retired')
})
