# syntax=docker/dockerfile:1
# auth-sidecar image: multi-stage, numeric non-root user, nothing written at
# run time (a read-only root filesystem works), node as PID 1 so that SIGTERM
# reaches the graceful shutdown. The build bundles every production
# dependency into dist/main.js and dist/chunks/ (what only a setting loads),
# so the final stage holds those, their licence notices and package.json: no
# node_modules, no demo, no development token server, no source maps.
ARG NODE_IMAGE=node:26-slim

# (No `FROM --platform=$BUILDPLATFORM` here, though the build's output is the
# same JavaScript for every architecture: Docker's legacy builder leaves
# BUILDPLATFORM empty and refuses the line.)
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
COPY scripts ./scripts
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
COPY dev ./dev
RUN npm run build && rm dist/chunks/*.map

FROM ${NODE_IMAGE}
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/dist/main.js ./dist/
COPY --from=build /app/dist/chunks ./dist/chunks
COPY package.json ./
# 65532: the conventional "nonroot" id; no shell login, no home needed.
USER 65532:65532
EXPOSE 8080 9090
# No curl in the image: node itself asks the admin port.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.ADMIN_PORT || 9090) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# From Node 22, V8 sizes its young generation from the machine's memory (up
# to 2 x 64 MB): capped at 2 x 8 MB, the sidecar holds about a quarter less
# memory once it has served load.
ENTRYPOINT ["node", "--max-semi-space-size=8", "dist/main.js"]
