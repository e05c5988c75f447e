import { mkdtempSync, renameSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { send, until } from '../helpers/build.js'
import { E2E_PASSWORD, fakeServers, spawnSidecar, untilReady, type SpawnedSidecar } from '../helpers/process.js'

function reloadLines (s: SpawnedSidecar): string[] {
  return s.run.stdout.filter((l) => l.includes('"event":"config_reload"'))
}

t.test('a reload that changes only the default route keeps the named routes that do not inherit the change', async (t) => {
  const { tokenServer: tokens, upstream } = await fakeServers(t, { clients: { 'legacy-app': undefined, 'other-app': undefined, 'billing-app': undefined } })
  const file = join(mkdtempSync(join(tmpdir(), 'reload-default-')), 'config.yaml')
  const version = (base: string, clientId: string): string => `
BASE_URL: ${upstream.url}/${base}
AUTH_CLIENT_ID: ${clientId}
routes:
  billing:
    BASE_URL: ${upstream.url}/billing
    PATH: /billing
    AUTH_CLIENT_ID: billing-app
  reports:
    BASE_URL: ${upstream.url}/reports
    PATH: /reports
`
  const write = (text: string): void => {
    writeFileSync(`${file}.tmp`, text)
    renameSync(`${file}.tmp`, file)
  }
  write(version('api-v1', 'legacy-app'))
  // the file's BASE_URL and AUTH_CLIENT_ID, not the environment's
  const s = await spawnSidecar(t, '', tokens.url, E2E_PASSWORD, { CONFIG_FILE: file, AUTH_CLIENT_ID: '' })
  await untilReady(s)
  const reload = async (text: string): Promise<Record<string, unknown>> => {
    const before = reloadLines(s).length
    write(text)
    await until(() => reloadLines(s).length > before, 10_000)
    return JSON.parse(reloadLines(s).at(-1)!) as Record<string, unknown>
  }
  const grants = (client: string): number => tokens.grants.filter((g) => g.form.client_id === client).length
  for (const path of ['/billing/a', '/reports/a', '/a']) t.equal((await send(`${s.proxyUrl}${path}`)).status, 200, `${path} is answered`)
  t.same([grants('legacy-app'), grants('billing-app')], [1, 1])

  const moved = await reload(version('api-v2', 'legacy-app'))
  t.match(moved, { outcome: 'applied', added: [], removed: [] })
  t.same(moved.changed, ['default'], 'a new BASE_URL changes the default route alone')
  t.equal((await send(`${s.proxyUrl}/b`)).status, 200)
  t.equal(upstream.received.at(-1)!.url, '/api-v2/b', 'the default route on its new BASE_URL')
  t.equal((await send(`${s.proxyUrl}/billing/b`)).status, 200)
  t.equal(upstream.received.at(-1)!.url, '/billing/b', 'the named route as it was')

  const changed = await reload(version('api-v2', 'other-app'))
  t.match(changed, { outcome: 'applied', added: [], removed: [] })
  t.same(changed.changed, ['default', 'reports'], 'a route inheriting the default route\'s credential changes with it; one with its own does not')
  await until(() => grants('other-app') === 1)
  t.equal((await send(`${s.proxyUrl}/reports/c`)).status, 200)
  t.equal(upstream.received.at(-1)!.tokenValid, true)
  t.same([grants('legacy-app'), grants('billing-app'), grants('other-app')], [1, 1, 1], 'no new grant but the changed credential\'s')
})
