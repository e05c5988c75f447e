import { copyFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { TlsFileSets } from '../../src/tls/files.js'
import { TestCa } from '../helpers/certificates.js'
import { captureLogger } from '../helpers/log.js'

// A reload's configuration is checked before it is applied, but a file can
// change between the two: the route that failed to load its files must be
// able to load them once they are fixed, and the files in use stay watched.
t.test('TLS files that could not be loaded are read again by the next one to ask for them; the others stay watched', async (t) => {
  const dir = t.testdir({})
  const ca = TestCa.create(join(dir, 'ca'))
  const kept = ca.issue('kept', { cn: 'sidecar-kept' })
  const later = ca.issue('later', { cn: 'sidecar-later' })
  const names = { cert: 'ROUTE_BILLING_UPSTREAM_TLS_CERT_FILE', key: 'ROUTE_BILLING_UPSTREAM_TLS_KEY_FILE', ca: 'ROUTE_BILLING_UPSTREAM_TLS_CA_FILE' }
  const missing = { certFile: join(dir, 'billing.crt'), keyFile: join(dir, 'billing.key'), names }
  const sets = new TlsFileSets(captureLogger().logger)
  t.teardown(async () => await sets.close())
  const inUse = await sets.of({ certFile: kept.certFile, keyFile: kept.keyFile, names }, 'upstream')

  await t.rejects(sets.of(missing, 'upstream (route billing)'), /ROUTE_BILLING_UPSTREAM_TLS_CERT_FILE/)
  await sets.watch()
  t.equal(inUse.watching, true, 'a failed set does not stop the others being watched')

  copyFileSync(later.certFile, missing.certFile)
  copyFileSync(later.keyFile, missing.keyFile)
  const loaded = await sets.of(missing, 'upstream (route billing)')
  t.equal(loaded.certificate?.subject, 'CN=sidecar-later', 'read again once the files are there')
  await sets.watch()
  t.equal(loaded.watching, true)
  t.equal(sets.size, 2)
})
