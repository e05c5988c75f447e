// A pipelining flood (SPEC §10.4): one connection sends FLOOD_REQUESTS GETs
// and reads nothing; the sidecar's RSS is sampled every 500 ms for 10 s, then
// read again once the client has left. On 127.0.0.1 only, after npm run build.
//
//   node bench/flood.mjs [main.js]          (default dist/main.js)
//   FLOOD_REQUESTS (20000); FLOOD_NODE_FLAGS and FLOOD_GLIBC_TUNABLES replace
//   the image's start-up options ('' for none); FLOOD_BARE=1 floods
//   bench/bare-proxy.mjs instead.
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { connect } from 'node:net'
import { fileURLToPath } from 'node:url'
import { IMAGE_GLIBC_TUNABLES, nodeFlagsFor } from '../scripts/image-options.mjs'

const root = fileURLToPath(new URL('..', import.meta.url))
const main = process.argv[2] ?? 'dist/main.js'
const REQUESTS = Number(process.env.FLOOD_REQUESTS ?? 20_000)
const NODE_FLAGS = (process.env.FLOOD_NODE_FLAGS ?? nodeFlagsFor()).split(' ').filter(Boolean)
const GLIBC_TUNABLES = process.env.FLOOD_GLIBC_TUNABLES ?? IMAGE_GLIBC_TUNABLES
const BARE = process.env.FLOOD_BARE === '1'
const [PROXY_PORT, ADMIN_PORT] = [24000, 24001]

const kids = []
process.on('exit', () => kids.forEach((k) => k.kill('SIGKILL')))
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const launch = (args, env = {}) => new Promise((resolve) => {
  const c = spawn(process.execPath, args, { cwd: root, env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'pipe', 'inherit'] })
  kids.push(c)
  c.stdout.once('data', (d) => resolve(JSON.parse(String(d).split('\n')[0])))
})
const rss = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024

const upstream = await launch(['bench/upstream.mjs'])
const tokens = await launch(['dist/dev-token-server.mjs'], { TOKEN_SECONDS: '300' })
const env = BARE
  ? { UPSTREAM: `http://127.0.0.1:${upstream.port}`, PORT: String(PROXY_PORT) }
  : {
      BASE_URL: `http://127.0.0.1:${upstream.port}`,
      AUTH_URL: tokens.url,
      AUTH_CLIENT_ID: 'legacy-app',
      AUTH_USERNAME: 'service-user',
      AUTH_PASSWORD: 'service-password',
      PROXY_PORT: String(PROXY_PORT),
      ADMIN_PORT: String(ADMIN_PORT),
      LOG_LEVEL: 'warn',
      ACCESS_LOG: 'false',
      ...(GLIBC_TUNABLES !== '' && { GLIBC_TUNABLES })
    }
const proxy = spawn(process.execPath, [...(BARE ? [] : NODE_FLAGS), BARE ? 'bench/bare-proxy.mjs' : main], { cwd: root, env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'ignore', 'inherit'] })
kids.push(proxy)
for (;;) {
  const ok = await fetch(`http://127.0.0.1:${PROXY_PORT}/`).then((r) => r.status === 200, () => false)
  if (ok) break
  await sleep(100)
}
for (let i = 0; i < 200; i++) await (await fetch(`http://127.0.0.1:${PROXY_PORT}/warm`)).text()
await sleep(2_000)
const base = rss(proxy.pid)

const socket = connect(PROXY_PORT, '127.0.0.1')
socket.pause() // reads nothing
await new Promise((resolve) => socket.once('connect', resolve))
const batch = 'GET /item HTTP/1.1\r\nHost: a\r\n\r\n'.repeat(1_000)
for (let sent = 0; sent < REQUESTS; sent += 1_000) {
  if (!socket.write(batch)) await sleep(10)
}
let peak = 0
for (let i = 1; i <= 20; i++) {
  await sleep(500)
  peak = Math.max(peak, rss(proxy.pid) - base)
}
const held = rss(proxy.pid) - base
const admin = BARE ? null : await fetch(`http://127.0.0.1:${ADMIN_PORT}/healthz`).then((r) => r.status, (e) => String(e))
socket.destroy()
await sleep(1_000)
console.log(JSON.stringify({
  proxy: BARE ? 'bare @fastify/http-proxy' : main,
  options: BARE ? '' : `${GLIBC_TUNABLES !== '' ? `GLIBC_TUNABLES=${GLIBC_TUNABLES} ` : ''}node ${NODE_FLAGS.join(' ')}`.trim(),
  requests: REQUESTS,
  baseMb: Math.round(base),
  peakGrowthMb: Math.round(peak),
  growthAfter10sMb: Math.round(held),
  growthAfterTheClientLeftMb: Math.round(rss(proxy.pid) - base),
  adminStatus: admin
}))
process.exit(0)
