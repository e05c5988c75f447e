import { spawn } from 'node:child_process'
import t from 'tap'
import { LOG_FLUSH_MS } from '../../src/logger.js'
import { root, runTs } from '../helpers/process.js'

/** A module that makes the sidecar's logger, `log`, at info, then runs `lines`. */
function loggingScript (...lines: string[]): string {
  return ["import { createLogger } from './src/logger.js'", "const log = createLogger('info')", ...lines].join('\n')
}

t.test('a process that exits right after logging keeps its last lines', async (t) => {
  const script = loggingScript(
    "log.info({ requestId: 'r-1' }, 'first')",
    "log.error({ code: 3 }, 'last words')",
    'process.exit(3)'
  )
  const { code, stdout } = await runTs(['--input-type=module', '-e', script])
  t.equal(code, 3, 'the exit code the process chose')
  const lines = stdout.trim().split('\n').map((l) => JSON.parse(l) as { msg: string })
  t.same(lines.map((l) => l.msg), ['first', 'last words'])
})

t.test('a quiet process writes a line within LOG_FLUSH_MS, not only once a batch is full', async (t) => {
  const script = loggingScript(
    "log.info({ event: 'token' }, 'token obtained')",
    'setTimeout(() => {}, 10_000)'
  )
  const child = spawn(process.execPath, [`--import=${root}node_modules/@tapjs/typescript/dist/esm/import.mjs`, '--input-type=module', '-e', script], { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { child.kill('SIGKILL') })
  let spawned = 0
  child.once('spawn', () => { spawned = Date.now() })
  let giveUp: NodeJS.Timeout | undefined
  const line = await new Promise<string>((resolve) => {
    child.stdout.once('data', (d: Buffer) => resolve(String(d)))
    giveUp = setTimeout(() => resolve('{"msg":"nothing while the process ran"}'), 8_000)
  })
  clearTimeout(giveUp)
  const waited = Date.now() - spawned
  t.equal((JSON.parse(line) as { msg: string }).msg, 'token obtained')
  t.ok(child.exitCode === null, 'written while the process runs on')
  // the loader's start-up comes first: the bound is generous, the 10 s the process lives are not
  t.ok(waited < 5_000 + LOG_FLUSH_MS, `on stdout ${waited} ms after the start`)
})

t.test('a configuration logged by mistake shows no credential of any route', async (t) => {
  const script = loggingScript(
    "const sources = { password: { variable: 'AUTH_PASSWORD', value: 'hunter2-secret' } }",
    "log.info({ config: { routes: [{ name: 'default', credential: { sources } }, { name: 'billing', credential: { sources } }] } }, 'config')",
    'process.exit(0)'
  )
  const { code, stdout } = await runTs(['--input-type=module', '-e', script])
  t.equal(code, 0)
  t.notMatch(stdout, /hunter2-secret/, 'no route\'s secret in the line')
  const line = JSON.parse(stdout.trim()) as { config: { routes: Array<{ credential: { sources: unknown } }> } }
  t.same(line.config.routes.map((r) => r.credential.sources), ['[redacted]', '[redacted]'])
})
