// How the image starts the sidecar: the Dockerfile's ENTRYPOINT and ENV and
// package.json's "start" say the same (test/packaging/dockerfile.test.ts), and
// the bench runs the sidecar this way. docs/performance.md, "Start-up options",
// has the measurements behind them.
export const IMAGE_NODE_FLAGS = '--wasm-tiering-budget=2147483647 --heap-growing-percent=50 --max-semi-space-size=8'
export const IMAGE_GLIBC_TUNABLES = 'glibc.malloc.trim_threshold=33554432'
