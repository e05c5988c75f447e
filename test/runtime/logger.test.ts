import t from 'tap'
import { runTs } from '../helpers/process.js'

t.test('a process that exits right after logging keeps its last lines', async (t) => {
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
