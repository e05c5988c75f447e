import t from 'tap'
import { send } from '../helpers/build.js'
import { root, start, startSidecar } from '../helpers/process.js'

// src/fetch-global.ts: undici's index reads Node's lazy globalThis.Headers
// as it loads, which loaded Node's own copy of undici (17 ms of start-up,
// 35 ms with the image's V8 options). The sidecar sets the getter aside
// while its modules load and puts it back.
const report = ['--import', `${root}test/e2e/fixtures/report-builtins.mjs`]
// Node 20 only: from Node 22 the global is left alone (src/fetch-global.ts)
const fetchLoaded = Number(process.versions.node.split('.')[0]) >= 22

function reportOf (stderr: string[]): { fetchLoaded: boolean, headers: string } {
  const line = stderr.join('').split('\n').find((l) => l.startsWith('{"fetchLoaded"'))
  if (line === undefined) throw new Error(`no report in stderr: ${stderr.join('')}`)
  return JSON.parse(line) as { fetchLoaded: boolean, headers: string }
}

t.test(`loading the sidecar ${fetchLoaded ? 'loads' : 'does not load'} Node's fetch, and globalThis.Headers works after`, async (t) => {
  const run = start({}, root, ['--version'], { nodeArgs: report })
  t.equal(await run.exited, 0)
  t.same(reportOf(run.stderr), { fetchLoaded, headers: 'function' })
})

t.test('the same through starting, taking a token, proxying a request and a scrape', async (t) => {
  const { run, proxyUrl, adminUrl } = await startSidecar(t, {}, {}, true, { nodeArgs: report })
  t.equal((await send(`${proxyUrl}/anything`)).status, 200)
  t.equal((await send(`${adminUrl}/metrics`)).status, 200)
  run.child.kill('SIGTERM')
  t.equal(await run.exited, 0)
  t.same(reportOf(run.stderr), { fetchLoaded, headers: 'function' })
})
