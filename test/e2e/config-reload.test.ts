import { mkdirSync, mkdtempSync, renameSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { metric, send, until } from '../helpers/build.js'
import { E2E_PASSWORD, fakeServers, spawnSidecar, untilReady, type SpawnedSidecar } from '../helpers/process.js'

/**
 * A directory laid out as the kubelet lays out a ConfigMap's volume: the
 * file is a symlink through `..data`, itself a symlink to a timestamped
 * directory; an update writes a new directory and swaps `..data` at once.
 */
class ConfigMapVolume {
  readonly path: string
  #version = 0
  constructor (readonly dir: string) {
    this.path = join(dir, 'config.yaml')
  }

  write (text: string): void {
    const version = `..v${++this.#version}`
    mkdirSync(join(this.dir, version))
    writeFileSync(join(this.dir, version, 'config.yaml'), text)
    symlinkSync(version, join(this.dir, '..data_tmp'))
    renameSync(join(this.dir, '..data_tmp'), join(this.dir, '..data'))
    if (this.#version === 1) symlinkSync('..data/config.yaml', this.path)
  }
}

function reloadLines (s: SpawnedSidecar): string[] {
  return s.run.stdout.filter((l) => l.includes('"event":"config_reload"'))
}

/** A new version written, and the reload line it gives. */
async function reloadTo (s: SpawnedSidecar, volume: ConfigMapVolume, text: string): Promise<Record<string, unknown>> {
  const before = reloadLines(s).length
  volume.write(text)
  await until(() => reloadLines(s).length > before, 10_000)
  return JSON.parse(reloadLines(s).at(-1)!) as Record<string, unknown>
}

t.test('CONFIG_FILE is applied live: routes added, changed and removed, no request failing, a token kept for an unchanged credential', async (t) => {
  const { tokenServer: tokens, upstream } = await fakeServers(t, { clients: { 'legacy-app': undefined, 'billing-app': undefined } })
  const volume = new ConfigMapVolume(mkdtempSync(join(tmpdir(), 'config-reload-')))
  const v1 = `
BASE_URL: http://127.0.0.1:9/file-base
UPSTREAM_CONNECTIONS: 1
routes:
  reports:
    BASE_URL: ${upstream.url}/reports-v1
    PATH: /reports
`
  volume.write(v1)
  // the default route from the environment, which wins over the file
  const s = await spawnSidecar(t, `${upstream.url}/api`, tokens.url, E2E_PASSWORD, { CONFIG_FILE: volume.path })
  await untilReady(s)
  const started = JSON.parse(s.run.stdout.find((l) => l.includes('auth-sidecar listening'))!) as { configFile: string, overriddenByEnvironment: string[] }
  t.same([started.configFile, started.overriddenByEnvironment], [volume.path, ['BASE_URL']], 'the start line names the file and what the environment overrides')
  const grants = (client: string): number => tokens.grants.filter((g) => g.form.client_id === client).length
  const pathOf = async (path: string): Promise<string> => {
    const res = await send(`${s.proxyUrl}${path}`)
    t.equal(res.status, 200, `${path} is answered`)
    return upstream.received.at(-1)!.url
  }
  const reloads = (): string[] => reloadLines(s)
  const reload = async (text: string): Promise<Record<string, unknown>> => await reloadTo(s, volume, text)

  t.equal(await pathOf('/reports/a'), '/reports-v1/a')
  t.equal(grants('legacy-app'), 1, 'one grant, the routes sharing the default credential')

  // a request in flight on the route the new version changes, and one queued behind it for the route's one connection
  const slow = send(`${s.proxyUrl}/reports/_slow/1500`)
  await until(() => upstream.received.some((r) => r.url === '/reports-v1/_slow/1500'))
  const queued = send(`${s.proxyUrl}/reports/queued`)
  const v2 = `
UPSTREAM_CONNECTIONS: 1
routes:
  reports:
    BASE_URL: ${upstream.url}/reports-v2
    PATH: /reports
  billing:
    BASE_URL: ${upstream.url}/billing
    PATH: /billing
    AUTH_CLIENT_ID: billing-app
`
  const applied = await reload(v2)
  t.match(applied, { outcome: 'applied', added: ['billing'], changed: ['reports'], removed: [], restart: [] }, 'the line names what changed')
  t.equal((await slow).status, 200, 'the request in flight finished on the version it started with')
  t.equal((await queued).status, 200, 'and the one queued behind it')
  t.ok(upstream.received.some((r) => r.url === '/reports-v1/queued'), 'on the old version too')
  t.equal(await pathOf('/reports/b'), '/reports-v2/b', 'the changed route')
  t.equal(await pathOf('/billing/c'), '/billing/c', 'the new route')
  t.equal(upstream.received.at(-1)!.tokenValid, true)
  t.same([grants('legacy-app'), grants('billing-app')], [1, 1], 'no new grant for the unchanged credential; the new one its own')
  t.equal(await metric(s.adminUrl, 'auth_sidecar_config_reloads_total{outcome="applied"}'), 1)

  // bad versions change nothing
  const broken = await reload(`${v2}\nAUTH_CLIENT_SECRET: "never-shown-3b7a\n  : [`)
  t.match(broken, { outcome: 'rejected', file: volume.path, problems: [/is not YAML or JSON/] })
  t.notMatch(reloads().at(-1)!, /never-shown-3b7a/, 'no value in the warning')
  const typo = await reload(v2.replace('PATH: /billing', 'PTH: /billing'))
  t.match(typo, { outcome: 'rejected', problems: [/routes\.billing\.PTH is not a route setting; did you mean PATH\?/] })
  t.match(await reload(`${v2}\nAUTH_PASSWORD_FILE: /nonexistent/password\n`), { outcome: 'rejected', problems: [/AUTH_PASSWORD_FILE/] }, 'a missing secret file')
  t.equal(await metric(s.adminUrl, 'auth_sidecar_config_reloads_total{outcome="rejected"}'), 3)
  t.equal(await pathOf('/billing/d'), '/billing/d', 'the running version stays whole')
  t.equal((await send(`${s.adminUrl}/readyz`)).status, 200)

  // a route removed: its path is the default route's again; a listener's setting waits for a restart
  const v3 = `
UPSTREAM_CONNECTIONS: 1
ADMIN_MAX_CONNECTIONS: 32
routes:
  reports:
    BASE_URL: ${upstream.url}/reports-v2
    PATH: /reports
`
  t.match(await reload(v3), { outcome: 'applied', removed: ['billing'], added: [], changed: [], restart: ['ADMIN_MAX_CONNECTIONS'] })
  t.match(reloads().at(-1)!, /ADMIN_MAX_CONNECTIONS take effect at the next restart/)
  t.equal(await pathOf('/billing/e'), '/api/billing/e', 'what an unknown path gets')
  t.equal(await pathOf('/reports/f'), '/reports-v2/f')
  t.same([grants('legacy-app'), grants('billing-app')], [1, 1], 'still no new grant')

  // SIGHUP re-reads it: nothing changed, nothing applied, and the sidecar goes on
  const count = reloads().length
  s.run.child.kill('SIGHUP')
  await until(() => reloads().length > count || s.run.child.exitCode !== null)
  t.match(JSON.parse(reloads().at(-1)!), { outcome: 'unchanged', why: 'SIGHUP' }, 'an unchanged version is not applied again')
  t.equal(await pathOf('/reports/g'), '/reports-v2/g', 'still serving after SIGHUP')
  t.equal(s.run.child.exitCode, null, 'SIGHUP does not stop it')
  t.equal(await metric(s.adminUrl, 'auth_sidecar_config_reloads_total{outcome="applied"}'), 2)
})

t.test('new versions do not hurry the grant of credentials the auth server rejected', async (t) => {
  const { tokenServer: tokens, upstream } = await fakeServers(t)
  const volume = new ConfigMapVolume(mkdtempSync(join(tmpdir(), 'config-reload-')))
  volume.write('AUTH_SCOPE: s0\n')
  const s = await spawnSidecar(t, `${upstream.url}/api`, tokens.url, 'not-the-password-4d2c', { CONFIG_FILE: volume.path })
  await until(() => tokens.grants.some((g) => g.status === 400))
  for (const scope of ['s1', 's2', 's3']) t.match(await reloadTo(s, volume, `AUTH_SCOPE: ${scope}\n`), { outcome: 'applied' }, `a new credential (scope ${scope})`)
  await until(() => s.run.stdout.filter((l) => l.includes('the first grant waits its turn')).length === 3)
  t.equal(tokens.grants.length, 1, 'one grant in all: each new credential waits as the rejected one would')
  t.notMatch(s.run.stdout.join('\n'), /not-the-password-4d2c/)
})
