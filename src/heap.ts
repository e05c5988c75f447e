import { setFlagsFromString } from 'node:v8'

/**
 * How far V8 lets the old generation grow past its live size before the next
 * full (mark-compact) collection: 500% means up to six times the live size,
 * where V8's own factor is 1.1 to 4 depending on recent GC speed.
 *
 * Why: V8 counts external memory allocated since the last full GC (every
 * socket read is a fresh 64 KiB buffer) against the old generation's
 * headroom, and starts a full GC when the headroom falls below the young
 * generation's size. Buffers are freed by the next scavenge, which V8 runs
 * only after about 32 MB of them. The sidecar's live heap is small (about
 * 8 MB), so its headroom (about 11 MB) was always below that: a 1 GB upload
 * ran some 90 full GCs and moved 0.5-0.7 times nginx's bytes per second.
 * With six times the live size the headroom covers the buffers in flight:
 * one full GC per gigabyte and the upload on par with nginx
 * (docs/performance.md). The cost is garbage kept longer under load: RSS
 * under sustained load rises by about 25 MB, idle RSS does not change.
 */
export const HEAP_GROWING_PERCENT = 500

const FLAG = '--heap-growing-percent'

/**
 * Sets the growing factor unless the operator chose one (`node
 * --heap-growing-percent=N dist/main.js`). V8 reads it afresh at every GC,
 * so setting it after start-up takes effect from the next collection.
 */
export function tuneHeap (execArgv: readonly string[] = process.execArgv, setFlags: (flags: string) => void = setFlagsFromString): void {
  if (execArgv.some((a) => a.startsWith(FLAG) || a.startsWith('--heap_growing_percent'))) return
  setFlags(`${FLAG}=${HEAP_GROWING_PERCENT}`)
}
