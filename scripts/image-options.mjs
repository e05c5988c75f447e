// How the image starts the sidecar: the Dockerfile's ENTRYPOINT and ENV and
// package.json's "start" say the same (test/packaging/dockerfile.test.ts).
// docs/performance.md, "Start-up options", has the measurements behind them.
export const IMAGE_NODE_FLAGS = '--wasm-tiering-budget=2147483647 --heap-growing-percent=50 --max-semi-space-size=8'
export const IMAGE_GLIBC_TUNABLES = 'glibc.malloc.trim_threshold=33554432'

/**
 * The image's options for the Node that runs them, as the bench, the flood
 * bench and the flood test start the sidecar. `--max-semi-space-size=8` is
 * for Node 22 and later, whose V8 sizes the young generation from the
 * machine's memory (2 x 64 MB on a 24 GB machine): without it a pipelining
 * flood grew the process by 131-152 MB, with it by 47-49 (SPEC §10.4: under
 * 64). Node 20's V8 caps it at 2 x 16 MB by itself (the same flood: 45-46 MB),
 * and there the option cost 8-22% of a request's CPU in interleaved runs,
 * so it is left out.
 */
export function nodeFlagsFor (nodeVersion = process.versions.node) {
  const major = Number(nodeVersion.replace(/^v/, '').split('.')[0])
  return major >= 22 ? IMAGE_NODE_FLAGS : IMAGE_NODE_FLAGS.replace(/ ?--max-semi-space-size=\d+/, '')
}
