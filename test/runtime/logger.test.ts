import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import t from 'tap'

// The sidecar's stdout gathers lines up to 4 KiB before writing them; a
// process that exits in between must not lose what it logged last.
t.test('lines still buffered are written when the process exits', async (t) => {
  const script = [
    "import { createLogger } from './src/logger.js'",
    "const log = createLogger('info')",
    "log.info({ requestId: 'r-1' }, 'first')",
    "log.error({ code: 3 }, 'last words')",
    'process.exit(3)'
  ].join('\n')
  const run = promisify(execFile)(process.execPath, [
    '--import=./node_modules/@tapjs/typescript/dist/esm/import.mjs', '--input-type=module', '-e', script
  ])
  const err = await run.then(() => undefined, (e: { code: number, stdout: string }) => e)
  t.equal(err?.code, 3, 'the exit code the process chose')
  const lines = (err?.stdout ?? '').trim().split('\n').map((l) => JSON.parse(l) as { msg: string })
  t.same(lines.map((l) => l.msg), ['first', 'last words'])
})
