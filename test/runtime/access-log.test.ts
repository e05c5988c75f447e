import t from 'tap'
import { AccessLog } from '../../src/access-log.js'
import { captureLogger } from '../helpers/log.js'

const line = (n: number) => ({ requestId: `r-${n}`, method: 'GET', path: `/p/${n}`, status: 200, durationMs: n / 10 })
const nextTurn = () => new Promise((resolve) => setImmediate(resolve))

t.test('the lines of one event-loop turn are written and recorded at its end, in order, each once', async (t) => {
  const { logger, records } = captureLogger('info')
  const recorded: string[] = []
  const access = new AccessLog(logger, (l) => recorded.push(l.requestId))
  access.add(line(1))
  access.add(line(2))
  access.add(line(3))
  logger.flush()
  t.same(records(), [], 'nothing written during the turn')
  t.same(recorded, [], 'nor recorded')
  await nextTurn()
  t.same(recorded, ['r-1', 'r-2', 'r-3'])
  logger.flush()
  t.match(records(), [
    { msg: 'request', requestId: 'r-1', method: 'GET', path: '/p/1', status: 200, durationMs: 0.1, level: 30, component: undefined },
    { msg: 'request', requestId: 'r-2', path: '/p/2' },
    { msg: 'request', requestId: 'r-3', path: '/p/3' }
  ])
  t.equal(records().length, 3)
  t.type(records()[0]!.time, 'number')

  access.add(line(4))
  await nextTurn()
  await nextTurn()
  logger.flush()
  t.same(records().map((r) => r.requestId), ['r-1', 'r-2', 'r-3', 'r-4'], 'a later turn: its own line, nothing repeated')
  t.same(recorded, ['r-1', 'r-2', 'r-3', 'r-4'])
})

t.test('ACCESS_LOG=false: no line, the requests still recorded (the metrics)', async (t) => {
  const recorded: number[] = []
  const access = new AccessLog(undefined, (l) => recorded.push(l.status))
  access.add(line(1))
  access.add({ ...line(2), status: 499 })
  await nextTurn()
  t.same(recorded, [200, 499])
})

t.test('flush() writes what is pending at once, and the turn\'s end then has nothing left to write', async (t) => {
  const { logger, records } = captureLogger('info')
  const access = new AccessLog(logger, () => {})
  access.add(line(1))
  access.add(line(2))
  access.flush()
  logger.flush()
  t.same(records().map((r) => r.requestId), ['r-1', 'r-2'])
  await nextTurn()
  logger.flush()
  t.equal(records().length, 2, 'not written twice')
  access.flush()
  t.equal(records().length, 2, 'nothing pending: nothing written')
})
