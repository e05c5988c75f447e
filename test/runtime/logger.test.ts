import t from 'tap'
import { runTs } from '../helpers/process.js'

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
  const { code, stdout } = await runTs(['--input-type=module', '-e', script])
  t.equal(code, 3, 'the exit code the process chose')
  const lines = stdout.trim().split('\n').map((l) => JSON.parse(l) as { msg: string })
  t.same(lines.map((l) => l.msg), ['first', 'last words'])
})

t.test('lines leave in batches: at the size limit or after the interval, never as empty writes', async (t) => {
  const { LineBatch } = await import('../../src/logger.js')
  const writes: string[] = []
  const batch = new LineBatch({ write: (data) => { writes.push(data); return true } }, { bytes: 100, flushMs: 40 })
  batch.write('a'.repeat(30) + '\n')
  batch.write('b'.repeat(30) + '\n')
  t.same(writes, [], 'under the limit: held')
  batch.write('c'.repeat(40) + '\n')
  t.same(writes, ['a'.repeat(30) + '\n' + 'b'.repeat(30) + '\n' + 'c'.repeat(40) + '\n'], 'at the limit: one write, in order')
  batch.write('d\n')
  await new Promise((resolve) => setTimeout(resolve, 120))
  t.same(writes.slice(1), ['d\n'], 'the interval writes what is left, once')
  batch.flush()
  t.equal(writes.length, 2, 'nothing gathered: no write')
})
