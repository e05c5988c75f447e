import t from 'tap'
import { EndOfTurn, type AccessLine } from '../../src/proxy/access-log.js'

const line = (requestId: string): AccessLine => ({ requestId, method: 'GET', path: '/', status: 200, durationMs: 1 })

t.test('the lines of a turn are recorded after it, together and in order', async (t) => {
  const recorded: string[] = []
  const turns = new EndOfTurn((l) => recorded.push(l.requestId))
  turns.add(line('a'))
  turns.add(line('b'))
  t.same(recorded, [], 'nothing in the turn that answered')
  await new Promise((resolve) => setImmediate(resolve))
  t.same(recorded, ['a', 'b'])
  turns.add(line('c'))
  await new Promise((resolve) => setImmediate(resolve))
  t.same(recorded, ['a', 'b', 'c'], 'a later turn has its own pass')
})

t.test('flush records what is pending at once, and only once', async (t) => {
  const recorded: string[] = []
  const turns = new EndOfTurn((l) => recorded.push(l.requestId))
  turns.add(line('a'))
  turns.flush()
  t.same(recorded, ['a'])
  await new Promise((resolve) => setImmediate(resolve))
  t.same(recorded, ['a'], 'the scheduled pass finds nothing left')
})
