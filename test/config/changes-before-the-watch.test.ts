import { renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { CredentialStore } from '../../src/config/credentials.js'
import { ConfigReloader, type ReloadedConfig } from '../../src/reload.js'
import { TlsFileSets } from '../../src/tls/files.js'
import { until } from '../helpers/build.js'
import { TestCa } from '../helpers/certificates.js'
import { captureLogger } from '../helpers/log.js'

// A file read at start and replaced before its watch took its first look (a
// renewal landing while the sidecar starts) is seen all the same; one left as
// read changes nothing and says nothing.

function replace (file: string, text: string): void {
  writeFileSync(`${file}.new`, text)
  renameSync(`${file}.new`, file)
}

t.test('a client certificate renewed between its read and its watch is used', async (t) => {
  const ca = TestCa.create(join(t.testdir({}), 'ca'))
  const first = ca.issue('first', { cn: 'sidecar-first' })
  const second = ca.issue('second', { cn: 'sidecar-second' })
  const paths = { certFile: first.certFile, keyFile: first.keyFile, names: { cert: 'UPSTREAM_TLS_CERT_FILE', key: 'UPSTREAM_TLS_KEY_FILE', ca: 'UPSTREAM_TLS_CA_FILE' } }
  const { logger, lines } = captureLogger()
  const sets = new TlsFileSets(logger)
  t.teardown(async () => await sets.close())
  const files = await sets.of(paths, 'upstream')
  replace(first.keyFile, second.key)
  replace(first.certFile, second.cert)
  await sets.watch()
  await until(() => files.certificate?.subject === 'CN=sidecar-second', 5_000)
  t.ok(lines.some((l) => l.includes('client certificate renewed')), 'the renewal is logged')
})

t.test('a credential file rotated between its read and its watch is a change', async (t) => {
  const dir = t.testdir({ pass: 'first-password' })
  const store = new CredentialStore({ password: { variable: 'AUTH_PASSWORD_FILE', file: join(dir, 'pass') } }, () => {})
  t.equal((await store.read()).password, 'first-password')
  replace(join(dir, 'pass'), 'second-password')
  let changes = 0
  store.onChange(() => { changes++ })
  t.teardown(() => { store.close() })
  await until(() => changes > 0, 5_000)
  t.equal((await store.read()).password, 'second-password')
})

t.test('a credential file rotated is a change even when a grant read the new value first', async (t) => {
  const dir = t.testdir({ pass: 'first-password' })
  const store = new CredentialStore({ password: { variable: 'AUTH_PASSWORD_FILE', file: join(dir, 'pass') } }, () => {})
  t.equal((await store.read()).password, 'first-password')
  let changes = 0
  store.onChange(() => { changes++ })
  t.teardown(() => { store.close() })
  replace(join(dir, 'pass'), 'second-password')
  t.equal((await store.read()).password, 'second-password', 'a grant reads the rotated value before the watch looks')
  await until(() => changes > 0, 5_000)
  t.pass('told of the rotation')
})

t.test('CONFIG_FILE edited between its read and its watch is applied; left as read, nothing is applied or said', async (t) => {
  const path = join(t.testdir({ 'config.yaml': '' }), 'config.yaml')
  const config = (version: string): ReloadedConfig => ({ file: { path, overridden: [] }, variables: { BASE_URL: version }, warnings: [] })
  for (const edited of [true, false]) {
    const { logger, lines } = captureLogger()
    const started = config('http://127.0.0.1:9/v1')
    let reads = 0
    const applied: string[] = []
    const reloader = new ConfigReloader({
      config: started,
      read: async () => { reads++; return edited ? config('http://127.0.0.1:9/v2') : started },
      apply: async (next) => { applied.push(next.variables.BASE_URL!); return { added: [], removed: [], changed: ['default'], restart: [] } },
      count: () => {},
      log: logger
    })
    reloader.watch()
    t.teardown(() => { reloader.close() })
    await until(() => reads > 0 && (!edited || applied.length > 0), 5_000)
    if (edited) {
      t.same(applied, ['http://127.0.0.1:9/v2'], 'the edit is applied')
      t.match(JSON.parse(lines.at(-1)!), { event: 'config_reload', outcome: 'applied' })
    } else {
      await new Promise((resolve) => setImmediate(resolve))
      t.same(applied, [], 'nothing applied')
      t.same(lines, [], 'nothing said')
    }
  }
})
