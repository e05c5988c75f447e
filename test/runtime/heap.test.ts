import t from 'tap'
import { HEAP_GROWING_PERCENT, tuneHeap } from '../../src/heap.js'

t.test('the heap growing factor is set at start-up', async (t) => {
  const set: string[] = []
  tuneHeap([], (f) => set.push(f))
  t.same(set, [`--heap-growing-percent=${HEAP_GROWING_PERCENT}`])
})

t.test("the operator's own --heap-growing-percent wins", async (t) => {
  for (const argv of [['--heap-growing-percent=100'], ['--heap_growing_percent=50', '--enable-source-maps']]) {
    const set: string[] = []
    tuneHeap(argv, (f) => set.push(f))
    t.same(set, [], argv.join(' '))
  }
})
