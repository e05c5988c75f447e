import { constants, PerformanceObserver } from 'node:perf_hooks'
import { getHeapStatistics, setFlagsFromString } from 'node:v8'

/**
 * Headroom the old generation gets above its live size before the next full
 * (mark-compact) GC.
 *
 * Why: V8 counts external memory allocated since the last full GC (every
 * socket read is a fresh 64 KiB buffer) against the old generation's
 * headroom, and starts a full GC when the headroom falls below the young
 * generation's size. The buffers are freed by the next scavenge, which V8
 * runs only after about 32 MB of them. The sidecar's live heap is small
 * (about 8 MB) and V8's own growing factor (1.1 to 4 times the live size)
 * left it about 11 MB of headroom: a 1 GB upload ran some 90 full GCs and
 * moved 0.5 to 0.7 times nginx's bytes per second. With 48 MB of headroom the
 * buffers in flight fit: one full GC per gigabyte (with noteRequestBody
 * below, the upload on par with nginx; docs/performance.md). The cost is garbage kept longer: RSS
 * under sustained load rises by up to that much; idle RSS does not change.
 */
export const HEADROOM_BYTES = 48 * 1024 * 1024

/** The largest growing factor used, as V8's percent: six times the live size. */
export const MAX_GROWING_PERCENT = 500

const FLAG = '--heap-growing-percent'

/**
 * V8's `--heap-growing-percent` for a live heap of `liveBytes`: enough for
 * HEADROOM_BYTES, at most MAX_GROWING_PERCENT; 0 (V8's own factor, 1.1 to 4
 * times) once the live heap is larger than the headroom. The headroom is for
 * the small heap the sidecar has; a large live heap is left to V8's policy
 * rather than given a large multiple of itself.
 */
export function growingPercentFor (liveBytes: number): number {
  if (liveBytes >= HEADROOM_BYTES) return 0
  return Math.min(MAX_GROWING_PERCENT, Math.ceil(HEADROOM_BYTES / Math.max(liveBytes, 1) * 100))
}

export interface HeapTuning {
  /** the growing percent in force */
  readonly percent: number
  stop(): void
}

/**
 * Sets the growing factor for the live heap now and after every full GC.
 * V8 reads the flag afresh whenever it computes the next limit, at the end
 * of each GC. Does nothing when the operator chose a factor themselves
 * (`node --heap-growing-percent=N dist/main.js`).
 */
export function tuneHeap (
  execArgv: readonly string[] = process.execArgv,
  setFlags: (flags: string) => void = setFlagsFromString,
  liveBytes: () => number = () => getHeapStatistics().used_heap_size
): HeapTuning {
  let percent = -1
  const apply = (): void => {
    const next = growingPercentFor(liveBytes())
    if (next === percent) return
    percent = next
    setFlags(`${FLAG}=${next}`)
  }
  if (execArgv.some((a) => a.startsWith(FLAG) || a.startsWith('--heap_growing_percent'))) {
    return { percent: NaN, stop () {} }
  }
  apply()
  const observer = new PerformanceObserver((list) => {
    if (list.getEntries().some((e) => (e as { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR)) apply()
  })
  observer.observe({ entryTypes: ['gc'] })
  return {
    get percent () { return percent },
    stop () { observer.disconnect() }
  }
}

/**
 * Keeps WebAssembly on V8's baseline compiler, Liftoff: `--liftoff-only`,
 * set before undici compiles its HTTP/1.1 parser (llhttp, in WebAssembly) on
 * the first connection. Returns whether it set the flag.
 *
 * Why: once the parser is hot, which the token grant and one request
 * already make it, V8 recompiles its 34 KB main function with TurboFan on a
 * worker thread. That compile takes about 30 MB of working memory, and in
 * some starts glibc kept 10 MB of it resident in the worker's arena, pinned
 * by a few small freed blocks: idle RSS was 64 or 74 MB from one start to the
 * next (`gdb` `malloc_stats`: 11 MB in that arena, 64 KB of it in use).
 * TurboFan's code parses a typical response in 0.5–0.6 µs, Liftoff's in
 * 1.2–1.4 µs (`node bench/llhttp.mjs`): under a microsecond per request
 * against 10 MB, so the sidecar keeps Liftoff, which compiles all of llhttp
 * on x64 and arm64. JavaScript is unaffected. An operator's own Liftoff or
 * tiering flag on the command line wins.
 */
export function keepWasmOnLiftoff (
  execArgv: readonly string[] = process.execArgv,
  setFlags: (flags: string) => void = setFlagsFromString
): boolean {
  if (execArgv.some((a) => /^--(no-)?(liftoff|wasm[-_](tier[-_]up|dynamic[-_]tiering))([-_=]|$)/.test(a))) return false
  setFlags('--liftoff-only')
  return true
}

/** Size of the block whose release raises glibc's thresholds (it adjusts them up to 32 MiB). */
export const MALLOC_THRESHOLD_BYTES = 24 * 1024 * 1024

/** A request body of this declared size or more raises the thresholds, once per process. */
export const LARGE_BODY_BYTES = 8 * 1024 * 1024

/**
 * Keeps glibc's malloc from returning freed request bodies to the kernel
 * only to fault them in again.
 *
 * Why: Node copies every request body chunk into a fresh buffer of up to
 * 64 KiB, taken from malloc's main heap; a scavenge frees some 32 MB of them
 * at once. glibc gives the top of its heap back (brk) whenever more than its
 * trim threshold (128 KiB at first) is free there, so after a busy spell had
 * moved the heap's top, every upload chunk cost fresh, zeroed pages: 10,000
 * brk calls and 480,000 page faults per 2 GB uploaded, and 1.5 to 2 times the
 * CPU per gigabyte. Releasing one block above the mmap threshold makes glibc
 * raise both thresholds (its dynamic threshold: mmap to the block's size,
 * trim to twice that), after which the freed buffers stay in the heap for the
 * next ones: about 200 brk calls and 9,000 page faults for the same 2 GB
 * (`perf stat -e syscalls:sys_enter_brk,page-faults`, docs/performance.md).
 *
 * Only a large upload does it, not start-up: with the thresholds raised from
 * the start, the heap also kept what start-up freed (the WebAssembly
 * compiler's working memory among it) and idle RSS rose from 72 to 98 MB.
 * After a large upload the heap may keep up to 48 MB free for the next one.
 * The block itself is never touched (no resident memory) and is released
 * when V8 collects it, at the next GC. With other C libraries (musl) it is
 * only an allocation. Chunked uploads, without a declared length, do not
 * raise the thresholds.
 */
export function noteRequestBody (contentLength: number): void {
  if (thresholdsRaised || contentLength < LARGE_BODY_BYTES) return
  thresholdsRaised = true
  Buffer.allocUnsafeSlow(MALLOC_THRESHOLD_BYTES)
}

let thresholdsRaised = false
