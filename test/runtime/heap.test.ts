import { setFlagsFromString } from 'node:v8'
import t from 'tap'
import { growingPercentFor, HEADROOM_BYTES, keepWasmOnLiftoff, MAX_GROWING_PERCENT, tuneHeap } from '../../src/heap.js'
import { runTs } from '../helpers/process.js'

const MB = 1024 * 1024

t.test('the growing factor gives a small heap the headroom, and leaves a large one to V8', async (t) => {
  t.equal(growingPercentFor(8 * MB), MAX_GROWING_PERCENT, 'the sidecar at rest: six times its live size')
  t.equal(growingPercentFor(24 * MB), 200, '48 MB of headroom is twice 24 MB')
  t.equal(growingPercentFor(HEADROOM_BYTES - 1), 101)
  t.equal(growingPercentFor(HEADROOM_BYTES), 0, "V8's own factor from there on")
  t.equal(growingPercentFor(500 * MB), 0)
  t.equal(growingPercentFor(0), MAX_GROWING_PERCENT)
  for (const live of [10, 20, 33, 47].map((n) => n * MB)) {
    t.ok(live * growingPercentFor(live) / 100 >= HEADROOM_BYTES, `${live / MB} MB live: at least the headroom`)
  }
})

t.test('set at start-up for the live heap, and again after a full GC when the live heap changed', async (t) => {
  const set: string[] = []
  let live = 8 * MB
  const tuning = tuneHeap([], (f) => { set.push(f); setFlagsFromString(f) }, () => live)
  t.teardown(() => { tuning.stop(); setFlagsFromString('--heap-growing-percent=0') })
  t.same(set, ['--heap-growing-percent=500'])
  live = 24 * MB
  // a full GC: the observer re-reads the live heap
  const { runInNewContext } = await import('node:vm')
  setFlagsFromString('--expose-gc')
  const gc = runInNewContext('gc') as () => void
  gc()
  await new Promise((resolve) => setTimeout(resolve, 50))
  t.same(set, ['--heap-growing-percent=500', '--heap-growing-percent=200'])
  t.equal(tuning.percent, 200)
})

t.test("the operator's own --heap-growing-percent wins", async (t) => {
  for (const argv of [['--heap-growing-percent=100'], ['--heap_growing_percent=50', '--enable-source-maps']]) {
    const set: string[] = []
    tuneHeap(argv, (f) => set.push(f)).stop()
    t.same(set, [], argv.join(' '))
  }
})

t.test('a large declared request body raises the malloc thresholds, once; small ones do not', async (t) => {
  const { noteRequestBody, LARGE_BODY_BYTES, MALLOC_THRESHOLD_BYTES } = await import('../../src/heap.js')
  const original = Buffer.allocUnsafeSlow
  const sizes: number[] = []
  Buffer.allocUnsafeSlow = (size: number) => { sizes.push(size); return original(0) }
  t.teardown(() => { Buffer.allocUnsafeSlow = original })
  noteRequestBody(0)
  noteRequestBody(LARGE_BODY_BYTES - 1)
  t.same(sizes, [], 'small and chunked bodies leave malloc alone')
  noteRequestBody(LARGE_BODY_BYTES)
  noteRequestBody(10 * LARGE_BODY_BYTES)
  t.same(sizes, [MALLOC_THRESHOLD_BYTES], 'one block, released at the next GC')
  t.ok(MALLOC_THRESHOLD_BYTES > 128 * 1024 && MALLOC_THRESHOLD_BYTES <= 32 * 1024 * 1024, "within the range glibc's dynamic threshold follows")
})

t.test("WebAssembly stays on Liftoff; an operator's own Liftoff or tiering flag wins", async (t) => {
  const set: string[] = []
  t.equal(keepWasmOnLiftoff(['--enable-source-maps', '--heap-growing-percent=100'], (f) => set.push(f)), true)
  t.same(set, ['--liftoff-only'])
  for (const argv of [['--no-liftoff-only'], ['--liftoff'], ['--no-liftoff'], ['--wasm-tier-up'], ['--wasm_dynamic_tiering'], ['--no-wasm-dynamic-tiering']]) {
    const none: string[] = []
    t.equal(keepWasmOnLiftoff(argv, (f) => none.push(f)), false, argv.join(' '))
    t.same(none, [], argv.join(' '))
  }
})

t.test("undici's parser, hot, ends on TurboFan by default and on Liftoff once the sidecar set its flag", async (t) => {
  // in a child process: the flag is process-wide and cannot be unset
  const tier = async (...args: string[]): Promise<string> => (await runTs(['test/helpers/wasm-tier.ts', ...args], ['--allow-natives-syntax'])).stdout
  t.equal(await tier(), 'turbofan', "V8's default: the case the flag exists for")
  t.equal(await tier('--keep-liftoff'), 'liftoff', 'V8 reads --liftoff-only when set at run time')
})
