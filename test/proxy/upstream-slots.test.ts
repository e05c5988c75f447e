import { setImmediate as nextTurn } from 'node:timers/promises'
import t from 'tap'
import { UpstreamSlots, type Release } from '../../src/proxy/upstream-slots.js'

t.test('a place given back goes to the next waiter on the next turn, never to one whose client has gone meanwhile', async (t) => {
  const slots = new UpstreamSlots(2)
  const held = [slots.take()!, slots.take()!]
  t.equal(slots.take(), undefined, 'both taken')
  const gone = new Set<string>()
  const granted: string[] = []
  const places: Release[] = []
  for (const name of ['a', 'b', 'c']) slots.wait((release) => { granted.push(name); places.push(release) }, () => gone.has(name))

  // the clients of the first holder and of a and b leave together: read in one turn, told one by one
  gone.add('a')
  gone.add('b')
  held[0]!()
  t.same(granted, [], 'not handed at once: the departures read with it come first')
  await nextTurn()
  t.same(granted, ['c'], 'a and b, gone, are passed over; c has the place')
  t.equal(slots.take(), undefined, 'and none is left over')
  places[0]!()
  places[0]!()
  held[1]!()
  await nextTurn()
  t.ok(slots.take() !== undefined && slots.take() !== undefined, 'every place given back once, however often released')
  t.equal(slots.take(), undefined)
})

t.test('a newcomer does not pass those waiting', async (t) => {
  const slots = new UpstreamSlots(1)
  const first = slots.take()!
  const granted: string[] = []
  slots.wait(() => granted.push('waiting'), () => false)
  first()
  t.equal(slots.take(), undefined, 'the place freed is the waiter\'s')
  await nextTurn()
  t.same(granted, ['waiting'])
})
