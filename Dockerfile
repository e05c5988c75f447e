# syntax=docker/dockerfile:1
# auth-sidecar image: multi-stage, numeric non-root user, nothing written at
# run time (a read-only root filesystem works), node as PID 1 so that SIGTERM
# reaches the graceful shutdown. The build bundles every production
# dependency into dist/sidecar.cjs and makes V8's code cache for it with this
# image's Node and options (scripts/build.mjs, scripts/code-cache.mjs: the
# build stage runs the same Node as the final one), so the image ships the
# loader dist/main.js, the bundle, its licence notices, the cache, the
# package.json that makes dist/ CommonJS, and package.json; nothing else:
# no node_modules, no demo, no development token server, no source maps
# (npm run test:image checks).
ARG NODE_IMAGE=node:26-slim

# (No `FROM --platform=$BUILDPLATFORM` here, though the build's output is the
# same JavaScript for every architecture: Docker's legacy builder leaves
# BUILDPLATFORM empty and refuses the line. The release's arm64 build runs
# npm ci under emulation instead, a few minutes once per release.)
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
COPY scripts ./scripts
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
RUN npm run build

FROM ${NODE_IMAGE}
# GLIBC_TUNABLES and the V8 options below are start-up settings, measured in
# docs/performance.md ("Start-up options"): freed upload buffers stay in
# malloc's heap for the next ones instead of being returned to the kernel and
# faulted in again (up to 32 MB: a larger threshold also kept what a burst of
# requests freed); WebAssembly (undici's HTTP parser) stays on its baseline
# compiler, so the optimising compile's working memory never lands in the heap
# the first setting keeps; the old generation is collected once it has grown
# by half, not up to fourfold, and the young one is kept to 2 x 8 MB (Node
# 22 and later size it from the machine's memory, up to 2 x 64 MB), so that
# a burst's garbage does not grow the process (SPEC §10.4). Any V8 option
# turns off the code cache of Node's built-in modules (some 30 ms of
# start-up, counted in the figures). On Node 20 --max-semi-space-size is
# better left out: V8 caps the young generation there by itself, and the
# option cost CPU (scripts/image-options.mjs).
ENV NODE_ENV=production \
    GLIBC_TUNABLES=glibc.malloc.trim_threshold=33554432
WORKDIR /app
COPY --from=build /app/dist/package.json /app/dist/main.js /app/dist/sidecar.cjs /app/dist/sidecar.cjs.LEGAL.txt ./dist/
COPY --from=build /app/dist/code-cache ./dist/code-cache
COPY package.json ./
# 65532: the conventional "nonroot" id; no shell login, no home needed.
USER 65532:65532
EXPOSE 8080 9090
# No curl in the image: node itself asks the admin port.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.ADMIN_PORT || 9090) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "--wasm-tiering-budget=2147483647", "--heap-growing-percent=50", "--max-semi-space-size=8", "dist/main.js"]
