// A paired comparison of proxies' CPU per request: every process of every
// variant pinned to core 1 and loaded at the same time (load, upstream and
// token server on core 0), so that the machine's noise falls on all of them
// in the same seconds; each round's ratio to the first variant, then the
// median and range of those ratios. Absolute figures are inflated by the
// sharing; the ratios are what it is for (docs/performance.md).
//
//   node bench/pair.mjs variants.json     (after npm run build)
//   variants.json: [{ "name": "bare", "main": "bench/bare-proxy.mjs", "bare": true },
//                   { "name": "sidecar", "main": "dist/main.js", "flags": ["--wasm-tiering-budget=2147483647"],
//                     "env": { "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=134217728" } }]
//   ROUNDS (6), SECONDS per round (5), CONN per process (16), WARM seconds (12).
import { spawn, execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import autocannon from 'autocannon'
import { fileURLToPath } from 'node:url'
const root = fileURLToPath(new URL('..', import.meta.url))
const variants = JSON.parse(readFileSync(process.argv[2], 'utf8'))
const ROUNDS = Number(process.env.ROUNDS ?? 6), SECONDS = Number(process.env.SECONDS ?? 5), CONN = Number(process.env.CONN ?? 16)
const CLK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }))
execFileSync('taskset', ['-pc', '0', String(process.pid)])
const kids = []; process.on('exit', () => kids.forEach((k) => k.kill('SIGKILL')))
const ticks = (pid) => { const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' '); return +f[11] + +f[12] }
const rss = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024
const launch = (core, args, env = {}) => new Promise((resolve) => {
  const c = spawn('taskset', ['-c', String(core), process.execPath, ...args], { cwd: root, env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'pipe', 'inherit'] })
  kids.push(c); c.stdout.once('data', (d) => resolve({ c, info: JSON.parse(String(d).split('\n')[0]) }))
})
const up = await launch(0, ['bench/upstream.mjs'])
const ts = await launch(0, ['dist/dev-token-server.mjs'], { TOKEN_SECONDS: '10' })
let port = 23000
const procs = []
for (const v of variants) for (let i = 0; i < (v.procs ?? 1); i++) {
  const p = port++
  const env = v.bare ? { UPSTREAM: `http://127.0.0.1:${up.info.port}`, PORT: String(p) } : { BASE_URL: `http://127.0.0.1:${up.info.port}`, AUTH_URL: ts.info.url, AUTH_CLIENT_ID: 'legacy-app', AUTH_USERNAME: 'service-user', AUTH_PASSWORD: 'service-password', PROXY_PORT: String(p), ADMIN_PORT: String(p + 1000), ADMIN_HOST: '127.0.0.1', ...(v.env ?? {}) }
  const c = spawn('taskset', ['-c', '1', process.execPath, ...(v.flags ?? []), v.main], { cwd: root, env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'ignore', 'inherit'] })
  kids.push(c); procs.push({ v: v.name, url: `http://127.0.0.1:${p}/`, pid: c.pid })
}
await new Promise((r) => setTimeout(r, 3000))
await Promise.all(procs.map((p) => autocannon({ url: p.url, connections: CONN, duration: Number(process.env.WARM ?? 12) })))
const med = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor((s.length - 1) / 2)] }
const res = Object.fromEntries(variants.map((v) => [v.name, []]))
for (let r = 0; r < ROUNDS; r++) {
  const t0 = procs.map((p) => ticks(p.pid))
  const out = await Promise.all(procs.map((p) => autocannon({ url: p.url, connections: CONN, duration: SECONDS })))
  const cpu = procs.map((p, i) => (ticks(p.pid) - t0[i]) / CLK * 1e6 / out[i].requests.total)
  const byV = Object.fromEntries(variants.map((v) => [v.name, med(cpu.filter((_, i) => procs[i].v === v.name))]))
  const base = byV[variants[0].name]
  console.error(`round ${r + 1}: ` + variants.map((v) => `${v.name} ${byV[v.name].toFixed(1)} (${(byV[v.name] / base).toFixed(3)})`).join('  '))
  for (const v of variants) res[v.name].push(byV[v.name] / base)
}
for (const v of variants) console.log(`${v.name.padEnd(14)} ratio to ${variants[0].name}: median ${med(res[v.name]).toFixed(3)}  range ${Math.min(...res[v.name]).toFixed(3)}–${Math.max(...res[v.name]).toFixed(3)}  rss ${procs.filter((p) => p.v === v.name).map((p) => rss(p.pid).toFixed(0)).join('/')}`)
process.exit(0)
