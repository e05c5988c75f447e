// `npm run bench`: what auth-sidecar costs, measured against the direct path
// (the ceiling), bare @fastify/http-proxy (the library's floor) and nginx with
// a static Authorization header (the peer), interleaved A B C D A B C D ...
// so that the machine's noise falls on all of them alike.
//
// One process of a kind against one other cannot resolve 10% here (two
// identical processes differed by 10-15% for a whole run): each
// Node proxy runs as BENCH_PROCS processes, every process gets one slice of
// load per round, the order turns each round, and a variant's cost is the
// median of all its slices; the spread of its processes' own medians is
// printed beside it.
//
// Settings (environment): BENCH_ROUNDS (8), BENCH_SECONDS per slice (3),
// BENCH_PROCS (3 processes per Node proxy), BENCH_PREVIOUS (the main.js of
// an earlier build, measured as the variant "previous";
// BENCH_PREVIOUS_NODE_FLAGS starts it with Node options, none by default:
// with BENCH_PREVIOUS=$PWD/dist/main.js, two sets of start-up options
// compared in the same rounds), BENCH_NODE_FLAGS (the sidecar's Node
// options; the Dockerfile's by default),
// BENCH_CONNECTIONS (32), BENCH_STREAM_MB (1024), BENCH_STREAM_REPS
// (3), BENCH_TOKEN_SECONDS
// (access token lifetime during the run, 10), BENCH_GRANT_SECONDS (20, for
// the grants-per-request runs), BENCH_STARTS (5 start-up measurements;
// with BENCH_PREVIOUS, as many of that build's, in turns),
// BENCH_SETTLE_SECONDS (15: idle RSS is read this long after each proxy's
// first request, once V8's memory reducer has run; 1 reads it at once),
// BENCH_DPOP (ES256: the algorithm of the sidecar with AUTH_DPOP=true,
// measured against the bearer sidecars in rounds of their own after the
// main ones; empty leaves it out). The routes part runs sidecars with ten
// named routes: a request on a named route against one on their default
// route and on a one-route sidecar, in rounds of their own, and the idle
// RSS of one route, ten sharing its credential and ten each with its own.
// The tls part puts an HTTPS upstream behind sidecars with and without a
// client certificate, in rounds of their own: what mutual TLS adds.
// The forward part puts sidecars with the forward proxy on before an HTTPS
// upstream and sends the same request both ways in, through an intercepted
// connection (CONNECT, TLS) and to PROXY_PORT, in rounds of their own, over
// kept-alive connections and over a new connection per request; and the
// idle RSS of sidecars with the forward proxy on and off.
// The tracing part runs sidecars with tracing off, on with one request in
// ten sampled and always on, exporting to a local OTLP/HTTP sink, in rounds
// of their own.
//
// CPU pinning: where `taskset` exists and there are two or more cores, every
// proxy runs on core 1 alone, and the load generator and the upstream on
// core 0, so that the proxy's own cost is what is measured.
import { execFileSync, spawn } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs'
import { Agent, request } from 'node:http'
import { availableParallelism, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'
import { TestCa } from '../scripts/test-ca.mjs'
import { openClient, untilOkThrough } from './forward-load.mjs'

const root = fileURLToPath(new URL('..', import.meta.url))
const env = (name, fallback) => Number(process.env[name] ?? fallback)
const ROUNDS = env('BENCH_ROUNDS', 8)
const SECONDS = env('BENCH_SECONDS', 3)
const PROCS = env('BENCH_PROCS', 3)
const PREVIOUS = process.env.BENCH_PREVIOUS
const CONNECTIONS = env('BENCH_CONNECTIONS', 32)
const STREAM_MB = env('BENCH_STREAM_MB', 1024)
const STREAM_REPS = env('BENCH_STREAM_REPS', 3)
const TOKEN_SECONDS = env('BENCH_TOKEN_SECONDS', 10)
const GRANT_SECONDS = env('BENCH_GRANT_SECONDS', 20)
const STARTS = env('BENCH_STARTS', 5)
/** Idle RSS is read this long after the first request (V8's memory reducer has run by then), in the load part and for the first start. */
const SETTLE_SECONDS = env('BENCH_SETTLE_SECONDS', 15)
/** BENCH_ONLY=startup (or load, stream, grants, proofs, routes, tls, forward, tracing, comma-separated) runs only those parts. */
const ONLY = new Set((process.env.BENCH_ONLY ?? 'load,stream,grants,startup,proofs,routes,tls,forward,tracing').split(','))
const DPOP = process.env.BENCH_DPOP ?? 'ES256'
// The sidecar runs as the image starts it, with the Node options of the
// Dockerfile's ENTRYPOINT; BENCH_NODE_FLAGS replaces them ('' for none).
const IMAGE_FLAGS = (() => {
  const entrypoint = /^ENTRYPOINT (\[.*\])$/m.exec(readFileSync(join(root, 'Dockerfile'), 'utf8'))
  const command = entrypoint === null ? [] : JSON.parse(entrypoint[1])
  return command.slice(1, command.indexOf('dist/main.js'))
})()
const NODE_FLAGS = process.env.BENCH_NODE_FLAGS === undefined ? IMAGE_FLAGS : process.env.BENCH_NODE_FLAGS.split(' ').filter(Boolean)
const PREVIOUS_NODE_FLAGS = (process.env.BENCH_PREVIOUS_NODE_FLAGS ?? '').split(' ').filter(Boolean)
const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim())

const which = (cmd) => { try { return execFileSync('which', [cmd], { encoding: 'utf8' }).trim() } catch { return undefined } }
const pinning = which('taskset') !== undefined && availableParallelism() >= 2
if (pinning) execFileSync('taskset', ['-pc', '0', String(process.pid)], { stdio: 'ignore' })
const onCore = (core, cmd, args) => pinning ? ['taskset', ['-c', String(core), cmd, ...args]] : [cmd, args]

const children = []
process.on('exit', () => { for (const c of children) c.kill('SIGKILL') })
process.on('SIGINT', () => process.exit(130))

/** Starts a process; resolves with it and the first JSON line it prints. */
function launch (core, cmd, args, extraEnv = {}, ipc = false) {
  const [c, a] = onCore(core, cmd, args)
  const child = spawn(c, a, { cwd: root, env: { PATH: process.env.PATH, ...extraEnv }, stdio: ['ignore', 'pipe', 'inherit', ...(ipc ? ['ipc'] : [])] })
  children.push(child)
  return new Promise((resolve, reject) => {
    let buf = ''
    child.once('exit', (code) => reject(new Error(`${cmd} ${args.join(' ')} exited with ${code}`)))
    child.stdout.on('data', function onData (chunk) {
      buf += chunk
      const line = buf.split('\n').find((l) => l.startsWith('{'))
      if (line !== undefined) {
        child.stdout.off('data', onData)
        child.stdout.resume()
        resolve({ child, info: JSON.parse(line) })
      }
    })
  })
}

/** The pid that does the work (taskset execs, so it is the child's own). */
const cpuTicks = (pid) => {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
  return Number(fields[11]) + Number(fields[12])
}
const rssMb = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function get (url) {
  const res = await fetch(url)
  await res.arrayBuffer()
  return res.status
}

async function untilOk (url, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    try { if (await get(url) === 200) return } catch {}
    if (Date.now() > deadline) throw new Error(`${url} never answered 200`)
    await sleep(5)
  }
}

async function freePort () {
  const { createServer } = await import('node:net')
  return await new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)) })
  })
}

function tokenServerGrants (tokenServer) {
  return new Promise((resolve) => {
    tokenServer.child.once('message', (m) => resolve(m.grants))
    tokenServer.child.send('grants')
  })
}

async function startSidecar (upstreamPort, tokenServer, core = 1, main = 'dist/main.js', extraEnv = {}) {
  const [proxyPort, adminPort] = [await freePort(), await freePort()]
  // an earlier build runs as it was run then, without today's start-up
  // options unless BENCH_PREVIOUS_* give some
  const asImage = main === 'dist/main.js'
  const [c, a] = onCore(core, process.execPath, [...(asImage ? NODE_FLAGS : PREVIOUS_NODE_FLAGS), main])
  const child = spawn(c, a, {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      BASE_URL: `http://127.0.0.1:${upstreamPort}`,
      AUTH_URL: tokenServer.info.url,
      AUTH_CLIENT_ID: 'legacy-app',
      AUTH_USERNAME: 'service-user',
      AUTH_PASSWORD: 'service-password',
      PROXY_PORT: String(proxyPort),
      ADMIN_PORT: String(adminPort),
      ADMIN_HOST: '127.0.0.1',
      ...extraEnv
    },
    stdio: ['ignore', 'ignore', 'inherit']
  })
  children.push(child)
  return { child, port: proxyPort, adminPort }
}

function startNginx (upstreamPort, port) {
  const dir = mkdtempSync(join(tmpdir(), 'bench-nginx-'))
  const conf = `worker_processes 1;
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/body; proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi; uwsgi_temp_path ${dir}/uwsgi; scgi_temp_path ${dir}/scgi;
  upstream api { server 127.0.0.1:${upstreamPort}; keepalive 64; }
  server {
    listen 127.0.0.1:${port};
    client_max_body_size 0;
    proxy_request_buffering off;
    proxy_buffering off;
    location / {
      proxy_pass http://api;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Authorization "Bearer static-benchmark-token";
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }
  }
}
`
  writeFileSync(join(dir, 'nginx.conf'), conf)
  const [c, a] = onCore(1, which('nginx'), ['-c', join(dir, 'nginx.conf'), '-e', join(dir, 'error.log')])
  const child = spawn(c, a, { stdio: ['ignore', 'ignore', 'inherit'] })
  children.push(child)
  return { child, port, dir }
}

/** nginx's worker does the proxying; its master only supervises. */
function nginxWorkerPid (masterPid) {
  const out = execFileSync('pgrep', ['-P', String(masterPid)], { encoding: 'utf8' }).trim().split('\n')
  return Number(out[0])
}

async function load (url, opts = {}) {
  return await autocannon({ url, connections: CONNECTIONS, duration: SECONDS, ...opts })
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length === 0 ? NaN : s[Math.floor((s.length - 1) / 2)] }

function streamUpload (port, mb) {
  return new Promise((resolve, reject) => {
    const chunk = Buffer.alloc(1024 * 1024, 97)
    const started = process.hrtime.bigint()
    const req = request({ host: '127.0.0.1', port, path: '/upload', method: 'POST', agent: false, headers: { 'content-length': mb * chunk.length, 'content-type': 'application/octet-stream' } }, (res) => {
      let body = ''
      res.on('data', (c) => { body += c })
      res.on('end', () => {
        const seconds = Number(process.hrtime.bigint() - started) / 1e9
        if (res.statusCode !== 200 || JSON.parse(body).received !== mb * chunk.length) return reject(new Error(`upload failed: ${res.statusCode} ${body}`))
        resolve(mb / seconds)
      })
    })
    req.on('error', reject)
    let sent = 0
    const pump = () => {
      while (sent < mb) { sent++; if (!req.write(chunk)) return req.once('drain', pump) }
      req.end()
    }
    pump()
  })
}

function streamDownload (port, mb) {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint()
    request({ host: '127.0.0.1', port, path: `/bytes/${mb * 1024 * 1024}`, agent: false }, (res) => {
      let n = 0
      res.on('data', (c) => { n += c.length })
      res.on('end', () => {
        if (n !== mb * 1024 * 1024) return reject(new Error(`download got ${n} bytes`))
        resolve(mb / (Number(process.hrtime.bigint() - started) / 1e9))
      })
    }).on('error', reject).end()
  })
}

/** The work's result, with the process's peak RSS and CPU time during it (NaN without a pid). */
async function peakDuring (pid, work) {
  if (pid === undefined) return { value: await work(), peak: NaN, growth: NaN, cpuMs: NaN }
  const start = rssMb(pid)
  let peak = start
  const ticks = cpuTicks(pid)
  const t = setInterval(() => { peak = Math.max(peak, rssMb(pid)) }, 25)
  try {
    const value = await work()
    peak = Math.max(peak, rssMb(pid))
    return { value, peak, growth: peak - start, cpuMs: (cpuTicks(pid) - ticks) * 1000 / CLK_TCK }
  } finally { clearInterval(t) }
}

async function main () {
  if (!existsSync(join(root, 'dist/main.js'))) throw new Error('dist/main.js is missing: npm run build')
  const nginxBin = which('nginx')
  if (nginxBin === undefined) {
    console.error('nginx is not installed: the peer comparison is skipped. Install it with `apt-get install nginx-light` (Debian) and run again.')
  }
  console.error(`bench: ${ROUNDS} rounds × ${SECONDS} s × ${CONNECTIONS} connections per target; CPU pinning ${pinning ? 'on (proxies on core 1, load and upstream on core 0)' : 'off (taskset or a second core missing)'}`)

  const upstream = await launch(0, process.execPath, ['bench/upstream.mjs'])
  const upstreamUrl = `http://127.0.0.1:${upstream.info.port}`
  const tokenServer = await launch(0, process.execPath, ['dist/dev/token-server.js'], { TOKEN_SECONDS: String(TOKEN_SECONDS) }, true)
  const times = (n, f) => Promise.all(Array.from({ length: n }, (_, i) => f(i)))
  const bares = await times(PROCS, () => launch(1, process.execPath, ['bench/bare-proxy.mjs'], { UPSTREAM: upstreamUrl }))
  for (const b of bares) await untilOk(`http://127.0.0.1:${b.info.port}/`)
  const sidecars = await times(PROCS, () => startSidecar(upstream.info.port, tokenServer))
  for (const s of sidecars) await untilOk(`http://127.0.0.1:${s.port}/`)
  const previous = PREVIOUS === undefined ? [] : await times(PROCS, () => startSidecar(upstream.info.port, tokenServer, 1, PREVIOUS))
  for (const s of previous) await untilOk(`http://127.0.0.1:${s.port}/`)
  let nginx
  if (nginxBin !== undefined) {
    nginx = startNginx(upstream.info.port, await freePort())
    await untilOk(`http://127.0.0.1:${nginx.port}/`)
  }

  // a target is one process; a variant is a kind of proxy
  const targets = [
    { variant: 'direct', name: 'direct', url: upstreamUrl, pid: undefined },
    ...bares.map((b, i) => ({ variant: 'bare-proxy', name: `bare-proxy#${i + 1}`, url: `http://127.0.0.1:${b.info.port}`, pid: b.child.pid })),
    ...sidecars.map((s, i) => ({ variant: 'auth-sidecar', name: `auth-sidecar#${i + 1}`, url: `http://127.0.0.1:${s.port}`, pid: s.child.pid })),
    ...previous.map((s, i) => ({ variant: 'previous', name: `previous#${i + 1}`, url: `http://127.0.0.1:${s.port}`, pid: s.child.pid })),
    ...(nginx ? [{ variant: 'nginx', name: 'nginx', url: `http://127.0.0.1:${nginx.port}`, pid: nginxWorkerPid(nginx.child.pid) }] : [])
  ]
  const firstOf = (variant) => targets.find((t) => t.variant === variant)

  // memory 1 s after one request each, and idle: once V8's memory reducer
  // has run (it waits about 8 s for a quiet spell), SETTLE_SECONDS after
  const rssNow = () => Object.fromEntries(targets.filter((t) => t.pid).map((t) => [t.name, rssMb(t.pid)]))
  await sleep(1000)
  const startRss = rssNow()
  if (SETTLE_SECONDS > 1) await sleep((SETTLE_SECONDS - 1) * 1000)
  const idleRss = SETTLE_SECONDS > 1 ? rssNow() : startRss

  // warm-up, not recorded
  if (ONLY.has('load')) for (const t of targets) await load(t.url, { duration: 2 })

  const runs = Object.fromEntries(targets.map((t) => [t.name, []]))
  const grantsBefore = await tokenServerGrants(tokenServer)
  if (ONLY.has('load')) await inRounds(targets, runs)
  const sidecarRequests = targets.filter((t) => t.variant === 'auth-sidecar').reduce((n, t) => n + runs[t.name].reduce((m, r) => m + r.requests, 0), 0)
  const grantsDuringRuns = (await tokenServerGrants(tokenServer)) - grantsBefore

  const summary = summarize(targets, runs, startRss, idleRss)

  // streaming, interleaved like the rounds, one transfer at a time
  const streamTargets = ['direct', 'bare-proxy', 'auth-sidecar', 'previous', 'nginx']
    .map((v) => firstOf(v))
    .filter((t) => t !== undefined)
    .map((t) => ({ ...t, name: t.variant ?? t.name }))
  const streamRuns = Object.fromEntries(streamTargets.map((t) => [t.name, []]))
  const gigabytes = STREAM_MB / 1024
  for (let rep = 1; rep <= (ONLY.has('stream') ? STREAM_REPS : 0); rep++) {
    for (const t of streamTargets) {
      const port = Number(new URL(t.url).port)
      const up = await peakDuring(t.pid, () => streamUpload(port, STREAM_MB))
      const down = await peakDuring(t.pid, () => streamDownload(port, STREAM_MB))
      streamRuns[t.name].push({ up: up.value, down: down.value, upCpuMsPerGb: up.cpuMs / gigabytes, downCpuMsPerGb: down.cpuMs / gigabytes, peak: Math.max(up.peak, down.peak), growth: Math.max(up.growth, down.growth) })
      console.error(`stream ${rep} ${t.name.padEnd(12)} up ${up.value.toFixed(0)} MB/s  down ${down.value.toFixed(0)} MB/s${t.pid ? `  cpu ${(up.cpuMs / gigabytes).toFixed(0)} / ${(down.cpuMs / gigabytes).toFixed(0)} ms/GB  peak RSS ${Math.max(up.peak, down.peak).toFixed(0)} MB` : ''}`)
    }
  }
  const streaming = Object.fromEntries(Object.entries(streamRuns).filter(([, rs]) => rs.length > 0).map(([name, rs]) => [name, {
    uploadMBps: median(rs.map((r) => r.up)),
    downloadMBps: median(rs.map((r) => r.down)),
    uploadCpuMsPerGb: median(rs.map((r) => r.upCpuMsPerGb)),
    downloadCpuMsPerGb: median(rs.map((r) => r.downCpuMsPerGb)),
    peakRssMb: Math.max(...rs.map((r) => r.peak)),
    peakGrowthMb: Math.max(...rs.map((r) => r.growth))
  }]))

  // DPoP mode against bearer mode: rounds of their own, the bearer
  // sidecars against as many in DPoP mode (the token server binds its
  // tokens to their keys; the upstream checks nothing, so what differs is
  // the sidecar's own work), once the other Node proxies are stopped: more
  // processes on the core raise every Node proxy's cost.
  for (const t of targets) if (t.pid !== undefined && t.variant !== 'auth-sidecar' && t.variant !== 'nginx') process.kill(t.pid, 'SIGKILL')
  let dpop = null
  if (DPOP !== '' && ONLY.has('load')) {
    const started = await times(PROCS, () => startSidecar(upstream.info.port, tokenServer, 1, 'dist/main.js', { AUTH_DPOP: 'true', AUTH_DPOP_ALG: DPOP }))
    for (const d of started) await untilOk(`http://127.0.0.1:${d.port}/`)
    const pair = [
      ...targets.filter((t) => t.variant === 'auth-sidecar'),
      ...started.map((d, i) => ({ variant: 'auth-sidecar-dpop', name: `dpop#${i + 1}`, url: `http://127.0.0.1:${d.port}`, pid: d.child.pid }))
    ]
    for (const t of pair) await load(t.url, { duration: 2 })
    const dpopRuns = Object.fromEntries(pair.map((t) => [t.name, []]))
    await inRounds(pair, dpopRuns, 'dpop round')
    const dpopSummary = summarize(pair, dpopRuns)
    dpop = {
      alg: DPOP,
      summary: dpopSummary,
      cpuToBearer: dpopSummary['auth-sidecar-dpop'].cpuUsPerRequest / dpopSummary['auth-sidecar'].cpuUsPerRequest,
      cpuToBearerSpread: spreadOf(dpopSummary, 'auth-sidecar-dpop', 'auth-sidecar'),
      cpuToBearerByRound: byRoundOf(pair, dpopRuns, 'auth-sidecar-dpop', 'auth-sidecar'),
      runs: dpopRuns
    }
    for (const d of started) d.child.kill('SIGKILL')
  }

  // Routes: ten path routes to the same upstream, sharing the default
  // route's credential; in rounds of their own like DPoP's.
  const tenRoutes = (own) => Object.fromEntries(Array.from({ length: 10 }, (_, i) => [
    [`ROUTE_R${i + 1}_BASE_URL`, `http://127.0.0.1:${upstream.info.port}`],
    [`ROUTE_R${i + 1}_PATH`, `/r${i + 1}`],
    // a scope of its own makes a credential of its own: its own grants and token
    ...(own ? [[`ROUTE_R${i + 1}_AUTH_SCOPE`, `r${i + 1}`]] : [])
  ]).flat())
  let routes = null
  if (ONLY.has('routes')) {
    const ten = await times(PROCS, () => startSidecar(upstream.info.port, tokenServer, 1, 'dist/main.js', tenRoutes(false)))
    for (const d of ten) await untilOk(`http://127.0.0.1:${d.port}/r10/`)
    const set = [
      ...targets.filter((t) => t.variant === 'auth-sidecar'),
      ...ten.map((d, i) => ({ variant: 'ten routes, default route', name: `ten-default#${i + 1}`, url: `http://127.0.0.1:${d.port}/`, pid: d.child.pid })),
      ...ten.map((d, i) => ({ variant: 'ten routes, named route', name: `ten-named#${i + 1}`, url: `http://127.0.0.1:${d.port}/r10/x`, pid: d.child.pid }))
    ]
    for (const t of set) await load(t.url, { duration: 2 })
    const routeRuns = Object.fromEntries(set.map((t) => [t.name, []]))
    await inRounds(set, routeRuns, 'routes round')
    const routeSummary = summarize(set, routeRuns)
    for (const d of ten) d.child.kill('SIGKILL')
    // idle memory, all started together and read after the same settling time
    const kinds = { 'one route': {}, 'ten routes, one credential': tenRoutes(false), 'ten routes, ten credentials': tenRoutes(true) }
    const started = Object.fromEntries(await Promise.all(Object.entries(kinds).map(async ([kind, extra]) => [kind, await times(PROCS, () => startSidecar(upstream.info.port, tokenServer, 1, 'dist/main.js', extra))])))
    for (const group of Object.values(started)) for (const d of group) await untilOk(`http://127.0.0.1:${d.port}/`)
    await sleep(Math.max(SETTLE_SECONDS, 1) * 1000)
    const idleRss = Object.fromEntries(Object.entries(started).map(([kind, group]) => [kind, group.map((d) => rssMb(d.child.pid))]))
    for (const group of Object.values(started)) for (const d of group) d.child.kill('SIGKILL')
    routes = {
      summary: routeSummary,
      namedToDefault: routeSummary['ten routes, named route'].cpuUsPerRequest / routeSummary['ten routes, default route'].cpuUsPerRequest,
      namedToDefaultSpread: spreadOf(routeSummary, 'ten routes, named route', 'ten routes, default route'),
      namedToDefaultByRound: byRoundOf(set, routeRuns, 'ten routes, named route', 'ten routes, default route'),
      namedToOneRoute: routeSummary['ten routes, named route'].cpuUsPerRequest / routeSummary['auth-sidecar'].cpuUsPerRequest,
      namedToOneRouteByRound: byRoundOf(set, routeRuns, 'ten routes, named route', 'auth-sidecar'),
      idleRssMb: idleRss,
      runs: routeRuns
    }
    console.error(`routes: named / default route CPU ${routes.namedToDefault.toFixed(2)}; idle RSS ${Object.entries(idleRss).map(([k, v]) => `${k} ${median(v).toFixed(0)} MB`).join(', ')}`)
  }

  // Mutual TLS: an HTTPS upstream that asks for a client certificate, the
  // same sidecars with and without one; connections are kept alive, so
  // what differs is the handshakes and whatever a request pays for them.
  let tls = null
  if (ONLY.has('tls')) {
    const dir = mkdtempSync(join(tmpdir(), 'bench-tls-'))
    const ca = TestCa.create(dir)
    const server = ca.issue('server', { cn: '127.0.0.1', san: 'IP:127.0.0.1' })
    const client = ca.issue('client', { cn: 'bench-sidecar' })
    const secure = await launch(0, process.execPath, ['bench/upstream.mjs'], { TLS_CERT: server.certFile, TLS_KEY: server.keyFile, TLS_CA: ca.caFile })
    const trust = { UPSTREAM_TLS_CA_FILE: ca.caFile, BASE_URL: `https://127.0.0.1:${secure.info.port}` }
    const plain = await times(PROCS, () => startSidecar(secure.info.port, tokenServer, 1, 'dist/main.js', trust))
    const mutual = await times(PROCS, () => startSidecar(secure.info.port, tokenServer, 1, 'dist/main.js', { ...trust, UPSTREAM_TLS_CERT_FILE: client.certFile, UPSTREAM_TLS_KEY_FILE: client.keyFile }))
    for (const d of [...plain, ...mutual]) await untilOk(`http://127.0.0.1:${d.port}/`)
    const set = [
      ...plain.map((d, i) => ({ variant: 'https', name: `https#${i + 1}`, url: `http://127.0.0.1:${d.port}`, pid: d.child.pid })),
      ...mutual.map((d, i) => ({ variant: 'https, client certificate', name: `mtls#${i + 1}`, url: `http://127.0.0.1:${d.port}`, pid: d.child.pid }))
    ]
    for (const t of set) await load(t.url, { duration: 2 })
    const tlsRuns = Object.fromEntries(set.map((t) => [t.name, []]))
    await inRounds(set, tlsRuns, 'tls round')
    const tlsSummary = summarize(set, tlsRuns)
    for (const d of [...plain, ...mutual]) d.child.kill('SIGKILL')
    secure.child.kill('SIGKILL')
    rmSync(dir, { recursive: true, force: true })
    tls = {
      summary: tlsSummary,
      certificateToNone: tlsSummary['https, client certificate'].cpuUsPerRequest / tlsSummary.https.cpuUsPerRequest,
      certificateToNoneSpread: spreadOf(tlsSummary, 'https, client certificate', 'https'),
      certificateToNoneByRound: byRoundOf(set, tlsRuns, 'https, client certificate', 'https'),
      runs: tlsRuns
    }
    console.error(`tls: with a client certificate / without, CPU ${tls.certificateToNone.toFixed(2)}`)
  }

  // Forward proxy: the same request through an intercepted connection
  // (CONNECT, then TLS terminated by the sidecar) and to PROXY_PORT, on the
  // same sidecars before an HTTPS upstream, both ways driven by the same
  // undici client (autocannon cannot use a proxy). Kept alive, what differs
  // is the TLS layer between client and sidecar and the routing by origin;
  // with a new connection per request, less the kept-alive cost of the same
  // way, what a connection costs the sidecar: a CONNECT and a TLS handshake
  // (a full one, or one resuming a session as undici and most clients do),
  // or a TCP accept.
  let forward = null
  if (ONLY.has('forward')) {
    const dir = mkdtempSync(join(tmpdir(), 'bench-forward-'))
    const upstreamCa = TestCa.create(join(dir, 'upstream-ca'))
    const server = upstreamCa.issue('server', { cn: '127.0.0.1', san: 'IP:127.0.0.1' })
    // a CA of its own, as in production: the application trusts it, not the upstream's
    const forwardCa = TestCa.create(join(dir, 'forward-ca'), 'bench forward proxy CA')
    const forwardCaPem = readFileSync(forwardCa.caFile, 'utf8')
    const secure = await launch(0, process.execPath, ['bench/upstream.mjs'], { TLS_CERT: server.certFile, TLS_KEY: server.keyFile })
    const apiUrl = `https://127.0.0.1:${secure.info.port}/`
    const trust = { UPSTREAM_TLS_CA_FILE: upstreamCa.caFile, BASE_URL: `https://127.0.0.1:${secure.info.port}` }
    const withForward = async () => {
      const port = await freePort()
      const s = await startSidecar(secure.info.port, tokenServer, 1, 'dist/main.js', { ...trust, FORWARD_PROXY_PORT: String(port), FORWARD_PROXY_CA_CERT_FILE: forwardCa.caFile, FORWARD_PROXY_CA_KEY_FILE: join(forwardCa.dir, 'ca.key') })
      return { ...s, proxy: { uri: `http://127.0.0.1:${port}`, ca: forwardCaPem } }
    }
    const fwdSidecars = await times(PROCS, withForward)
    for (const d of fwdSidecars) {
      await untilOk(`http://127.0.0.1:${d.port}/`)
      await untilOkThrough({ url: apiUrl, proxy: d.proxy })
    }
    // every way in on every process, so that each ratio compares processes
    // with themselves: [variant, short name, client]
    const ways = [
      ['forward', 'fwd', { proxy: true }],
      ['reverse', 'rev', {}],
      ['forward, new connections', 'fwd-new', { proxy: true, newConnections: true, resumeTls: false }],
      ['forward, new connections, TLS resumed', 'fwd-resumed', { proxy: true, newConnections: true }],
      ['reverse, new connections', 'rev-new', { newConnections: true }]
    ]
    const set = ways.flatMap(([variant, short, o]) => fwdSidecars.map((d, i) => ({
      variant,
      name: `${short}#${i + 1}`,
      pid: d.child.pid,
      open: () => openClient({
        url: o.proxy ? apiUrl : `http://127.0.0.1:${d.port}/`,
        proxy: o.proxy ? d.proxy : undefined,
        connections: CONNECTIONS,
        newConnections: o.newConnections,
        resumeTls: o.resumeTls
      })
    })))
    for (const t of set) {
      const client = await t.open()
      await client.load(2)
      await client.close()
    }
    const forwardRuns = Object.fromEntries(set.map((t) => [t.name, []]))
    await inRounds(set, forwardRuns, 'forward round')
    const fwdSummary = summarize(set, forwardRuns)
    for (const d of fwdSidecars) d.child.kill('SIGKILL')
    // one request per connection: a new connection's cost is the request's less a kept-alive one's
    const perConnection = (a, b) => ({
      us: fwdSummary[a].cpuUsPerRequest - fwdSummary[b].cpuUsPerRequest,
      byRound: byRoundOf(set, forwardRuns, a, b, (x, y) => x - y)
    })

    // idle memory with the forward proxy on (after one intercepted request)
    // and off (after one request to PROXY_PORT), all started together and
    // read after the same settling time
    const [on, off] = await Promise.all([times(PROCS, withForward), times(PROCS, () => startSidecar(secure.info.port, tokenServer, 1, 'dist/main.js', trust))])
    await Promise.all([
      ...on.map((d) => untilOkThrough({ url: apiUrl, proxy: d.proxy })),
      ...off.map((d) => untilOkThrough({ url: `http://127.0.0.1:${d.port}/` }))
    ])
    await sleep(Math.max(SETTLE_SECONDS, 1) * 1000)
    const idleRss = { 'forward on': on.map((d) => rssMb(d.child.pid)), 'forward off': off.map((d) => rssMb(d.child.pid)) }
    for (const d of [...on, ...off]) d.child.kill('SIGKILL')
    secure.child.kill('SIGKILL')
    rmSync(dir, { recursive: true, force: true })

    forward = {
      summary: fwdSummary,
      forwardToReverse: fwdSummary.forward.cpuUsPerRequest / fwdSummary.reverse.cpuUsPerRequest,
      forwardToReverseSpread: spreadOf(fwdSummary, 'forward', 'reverse'),
      forwardToReverseByRound: byRoundOf(set, forwardRuns, 'forward', 'reverse'),
      newConnectionUs: {
        'forward, full TLS handshake': perConnection('forward, new connections', 'forward'),
        'forward, TLS session resumed': perConnection('forward, new connections, TLS resumed', 'forward'),
        'reverse, TCP': perConnection('reverse, new connections', 'reverse')
      },
      idleRssMb: idleRss,
      idleRssOnMinusOffMb: median(idleRss['forward on']) - median(idleRss['forward off']),
      // the issue's targets
      targets: { forwardToReverse: 1.15, idleRssOnMinusOffMb: 5 },
      runs: forwardRuns
    }
    const c = forward.newConnectionUs
    console.error(`forward: CPU per request forward / reverse ${forward.forwardToReverse.toFixed(2)} (round by round ${forward.forwardToReverseByRound.min.toFixed(2)}–${forward.forwardToReverseByRound.max.toFixed(2)}; target ≤ ${forward.targets.forwardToReverse}); a new connection ${c['forward, full TLS handshake'].us.toFixed(0)} µs (full TLS handshake), ${c['forward, TLS session resumed'].us.toFixed(0)} µs (resumed), reverse ${c['reverse, TCP'].us.toFixed(0)} µs; idle RSS on ${median(idleRss['forward on']).toFixed(0)} MB, off ${median(idleRss['forward off']).toFixed(0)} MB (${forward.idleRssOnMinusOffMb >= 0 ? '+' : ''}${forward.idleRssOnMinusOffMb.toFixed(1)} MB; target ≤ ${forward.targets.idleRssOnMinusOffMb})`)
  }

  // Tracing: the same sidecars with tracing off, on with one request in ten
  // sampled (parentbased_traceidratio 0.1), and always on, exporting over
  // OTLP/HTTP (protobuf, the default) to bench/otlp-sink.mjs on core 0, in
  // rounds of their own. The load sends no traceparent, so the ratio decides
  // at the sidecar; the sink counts the spans each variant really exported.
  let tracing = null
  if (ONLY.has('tracing')) {
    const ways = {
      'tracing off': undefined,
      'tracing on, 1 in 10 sampled': ['parentbased_traceidratio', '0.1'],
      'tracing on, always on': ['parentbased_always_on', '']
    }
    const started = await Promise.all(Object.entries(ways).map(async ([variant, sampler]) => {
      const sink = sampler === undefined ? undefined : await launch(0, process.execPath, ['bench/otlp-sink.mjs'], {}, true)
      const otel = sink === undefined
        ? {}
        : { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${sink.info.url}/v1/traces`, OTEL_TRACES_SAMPLER: sampler[0], OTEL_TRACES_SAMPLER_ARG: sampler[1] }
      return { variant, sink, sidecars: await times(PROCS, () => startSidecar(upstream.info.port, tokenServer, 1, 'dist/main.js', otel)) }
    }))
    for (const { sidecars } of started) for (const d of sidecars) await untilOk(`http://127.0.0.1:${d.port}/`)
    const set = started.flatMap(({ variant, sidecars }, v) => sidecars.map((d, i) => ({ variant, name: `tracing${v}#${i + 1}`, url: `http://127.0.0.1:${d.port}`, pid: d.child.pid })))
    for (const t of set) await load(t.url, { duration: 2 })
    // the warm-up's last batches leave within the exporter's schedule delay (5 s)
    await sleep(6000)
    const spansOf = (sink) => new Promise((resolve, reject) => {
      sink.child.once('message', resolve)
      sink.child.once('exit', () => reject(new Error('bench/otlp-sink.mjs exited')))
      sink.child.send('spans')
    })
    const before = await Promise.all(started.map(({ sink }) => sink === undefined ? undefined : spansOf(sink)))
    const tracingRuns = Object.fromEntries(set.map((t) => [t.name, []]))
    await inRounds(set, tracingRuns, 'tracing round')
    await sleep(6000)
    const after = await Promise.all(started.map(({ sink }) => sink === undefined ? undefined : spansOf(sink)))
    for (const [v, a] of after.entries()) if (a?.malformed > 0) console.error(`tracing: ${a.malformed} exports to the ${started[v].variant} sink could not be read: its span count is short`)
    const tracingSummary = summarize(set, tracingRuns)
    const requestsOf = (variant) => set.filter((t) => t.variant === variant).reduce((n, t) => n + tracingRuns[t.name].reduce((m, r) => m + r.requests, 0), 0)
    const spansPerRequest = Object.fromEntries(started.flatMap(({ variant, sink }, v) => sink === undefined ? [] : [[variant, (after[v].spans - before[v].spans) / requestsOf(variant)]]))
    for (const { sink, sidecars } of started) {
      for (const d of sidecars) d.child.kill('SIGKILL')
      sink?.child.kill('SIGKILL')
    }
    const against = (variant) => ({
      ratio: tracingSummary[variant].cpuUsPerRequest / tracingSummary['tracing off'].cpuUsPerRequest,
      spread: spreadOf(tracingSummary, variant, 'tracing off'),
      byRound: byRoundOf(set, tracingRuns, variant, 'tracing off')
    })
    tracing = {
      summary: tracingSummary,
      toOff: { 'tracing on, 1 in 10 sampled': against('tracing on, 1 in 10 sampled'), 'tracing on, always on': against('tracing on, always on') },
      spansPerRequest,
      // the issue's target, for one request in ten sampled
      targets: { sampledToOff: 1.15 },
      runs: tracingRuns
    }
    const x = tracing.toOff
    console.error(`tracing: CPU per request / off: 1 in 10 sampled ${x['tracing on, 1 in 10 sampled'].ratio.toFixed(2)} (target ≤ ${tracing.targets.sampledToOff}), always on ${x['tracing on, always on'].ratio.toFixed(2)}; spans exported per request ${Object.values(spansPerRequest).map((n) => n.toFixed(2)).join(' and ')}`)
  }

  // Grants and start-up are measured with no other Node proxy on core 1:
  // the others' timers and renewals would be counted in or slow them down.
  for (const t of targets) if (t.variant === 'auth-sidecar' && t !== firstOf('auth-sidecar')) process.kill(t.pid, 'SIGKILL')

  // token grants at two request rates
  const grantRates = []
  for (const rate of ONLY.has('grants') ? [500, undefined] : []) {
    const g0 = await tokenServerGrants(tokenServer)
    const r = await autocannon({ url: firstOf('auth-sidecar').url, connections: CONNECTIONS, duration: GRANT_SECONDS, ...(rate ? { overallRate: rate } : {}) })
    const grants = (await tokenServerGrants(tokenServer)) - g0
    grantRates.push({ rate: rate ? `${rate} req/s` : 'unbounded', rps: r.requests.average, requests: r.requests.total, grants, grantsPer100k: grants / r.requests.total * 100_000, grantsPerMinute: grants / GRANT_SECONDS * 60 })
    console.error(`grants at ${rate ?? 'unbounded'} req/s: ${grants} in ${GRANT_SECONDS} s over ${r.requests.total} requests`)
  }

  process.kill(firstOf('auth-sidecar').pid, 'SIGKILL')

  // start-up to the first proxied 200, less the grant's own time; with
  // BENCH_PREVIOUS, that build's too, in turns (before and after a change,
  // in the same minutes)
  async function oneStart (main, settle) {
    const grantStarted = process.hrtime.bigint()
    await fetch(tokenServer.info.tokenUrl, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'grant_type=password&client_id=legacy-app&username=service-user&password=service-password' }).then((r) => r.arrayBuffer())
    const grantMs = Number(process.hrtime.bigint() - grantStarted) / 1e6
    const t0 = process.hrtime.bigint()
    const s = await startSidecar(upstream.info.port, tokenServer, 1, main)
    await untilOk(`http://127.0.0.1:${s.port}/`)
    const total = Number(process.hrtime.bigint() - t0) / 1e6
    await sleep(1000)
    const after1s = rssMb(s.child.pid)
    // the first start also waits for V8's memory reducer, which runs after some seconds without work
    let idle
    if (settle && SETTLE_SECONDS > 1) {
      await sleep((SETTLE_SECONDS - 1) * 1000)
      idle = rssMb(s.child.pid)
    }
    s.child.kill('SIGKILL')
    return { totalMs: total, grantMs, excludingGrantMs: total - grantMs, rssAfter1sMb: after1s, ...(idle !== undefined && { idleRssMb: idle }) }
  }
  const startups = []
  const previousStartups = []
  for (let i = 0; i < (ONLY.has('startup') ? STARTS : 0); i++) {
    if (PREVIOUS && i % 2 === 1) previousStartups.push(await oneStart(PREVIOUS, false))
    startups.push(await oneStart('dist/main.js', i === 0))
    if (PREVIOUS && i % 2 === 0) previousStartups.push(await oneStart(PREVIOUS, false))
  }
  const startup = { medianMs: median(startups.map((s) => s.excludingGrantMs)), rssAfter1sMb: median(startups.map((s) => s.rssAfter1sMb)), idleRssMb: startups[0]?.idleRssMb ?? null, runs: startups }
  const previousStartup = previousStartups.length === 0 ? null : { medianMs: median(previousStartups.map((s) => s.excludingGrantMs)), rssAfter1sMb: median(previousStartups.map((s) => s.rssAfter1sMb)), runs: previousStartups }
  if (previousStartup !== null) console.error(`previous: ${previousStartup.medianMs.toFixed(0)} ms median; RSS 1 s later ${previousStartup.rssAfter1sMb.toFixed(0)} MB`)
  console.error(`start-up to first proxied 200 (excluding the grant): ${startup.medianMs.toFixed(0)} ms median; RSS 1 s later ${startup.rssAfter1sMb?.toFixed(0)} MB${startup.idleRssMb !== null ? `, idle ${SETTLE_SECONDS} s later ${startup.idleRssMb.toFixed(0)} MB` : ''}`)

  const s = summary['auth-sidecar']
  const spread = (a, b) => spreadOf(summary, a, b)
  const byRound = (a, b) => byRoundOf(targets, runs, a, b)
  const ratios = {
    cpuToBareProxyByRound: byRound('auth-sidecar', 'bare-proxy'),
    cpuToPreviousByRound: byRound('auth-sidecar', 'previous'),
    cpuToBareProxySpread: spread('auth-sidecar', 'bare-proxy'),
    cpuToPrevious: summary.previous ? s.cpuUsPerRequest / summary.previous.cpuUsPerRequest : null,
    cpuToPreviousSpread: spread('auth-sidecar', 'previous'),
    throughputToDirect: s.rps / summary.direct.rps,
    throughputToBareProxy: s.rps / summary['bare-proxy'].rps,
    throughputToNginx: summary.nginx ? s.rps / summary.nginx.rps : null,
    cpuToBareProxy: s.cpuUsPerRequest / summary['bare-proxy'].cpuUsPerRequest,
    cpuToNginx: summary.nginx ? s.cpuUsPerRequest / summary.nginx.cpuUsPerRequest : null,
    uploadToNginx: streaming.nginx ? streaming['auth-sidecar'].uploadMBps / streaming.nginx.uploadMBps : null,
    downloadToNginx: streaming.nginx ? streaming['auth-sidecar'].downloadMBps / streaming.nginx.downloadMBps : null
  }

  const result = {
    date: new Date().toISOString(),
    node: process.version,
    settings: { ROUNDS, SECONDS, PROCS, NODE_FLAGS: NODE_FLAGS.join(' '), CONNECTIONS, STREAM_MB, STREAM_REPS, TOKEN_SECONDS, GRANT_SECONDS, STARTS, SETTLE_SECONDS, pinning },
    summary,
    ratios,
    streaming,
    grants: { duringRuns: grantsDuringRuns, sidecarRequests, rates: grantRates },
    startup,
    previousStartup,
    dpop,
    routes,
    tls,
    forward,
    tracing,
    proofs: ONLY.has('proofs') ? proofCost() : null,
    runs
  }
  mkdirSync(join(root, 'bench/results'), { recursive: true })
  writeFileSync(join(root, 'bench/results/latest.json'), JSON.stringify(result, null, 2) + '\n')
  const md = table(result)
  writeFileSync(join(root, 'bench/results/latest.md'), md)
  process.stdout.write(md)

  for (const c of children) c.kill('SIGTERM')
  if (nginx) rmSync(nginx.dir, { recursive: true, force: true })
}

/**
 * BENCH_ROUNDS rounds over `list`, one slice of load per target each, the
 * order turned each round so that no process always comes first (each still
 * follows the same neighbour); each slice's figures are pushed to `runs`.
 * A target with `open` brings its own client (bench/forward-load.mjs),
 * opened before the slice's CPU is read, closed after.
 */
async function inRounds (list, runs, label = 'round') {
  for (let round = 1; round <= ROUNDS; round++) {
    const order = list.map((_, i) => list[(i + round - 1) % list.length])
    for (const t of order) {
      const client = t.open === undefined ? undefined : await t.open()
      const before = t.pid ? cpuTicks(t.pid) : 0
      let peak = t.pid ? rssMb(t.pid) : 0
      const sampler = t.pid ? setInterval(() => { peak = Math.max(peak, rssMb(t.pid)) }, 100) : undefined
      const r = client === undefined ? await load(t.url) : await client.load(SECONDS)
      clearInterval(sampler)
      const ticks = t.pid ? cpuTicks(t.pid) - before : NaN
      await client?.close()
      const requests = r.requests.total
      runs[t.name].push({
        rps: r.requests.average,
        p50: r.latency.p50,
        p99: r.latency.p99,
        requests,
        cpuUsPerRequest: t.pid ? (ticks / CLK_TCK) * 1e6 / requests : NaN,
        non2xx: r.non2xx + r.errors,
        loadRss: peak
      })
      console.error(`${label} ${round} ${t.name.padEnd(15)} ${Math.round(r.requests.average)} req/s  p50 ${r.latency.p50} ms  p99 ${r.latency.p99} ms${t.pid ? `  cpu ${runs[t.name].at(-1).cpuUsPerRequest.toFixed(1)} µs/req` : ''}${r.non2xx + r.errors ? `  NON-2XX ${r.non2xx + r.errors}` : ''}${r.firstError ? ` (${r.firstError})` : ''}`)
    }
  }
}

/** Per variant: medians of all its slices, and each process's own median of CPU per request. */
function summarize (list, runs, startRss = {}, idleRss = {}) {
  const variants = [...new Set(list.map((t) => t.variant))]
  return Object.fromEntries(variants.map((variant) => {
    const procs = list.filter((t) => t.variant === variant)
    const rs = procs.flatMap((t) => runs[t.name])
    return [variant, {
      processes: procs.length,
      rps: median(rs.map((r) => r.rps)),
      p50: median(rs.map((r) => r.p50)),
      p99: median(rs.map((r) => r.p99)),
      cpuUsPerRequest: median(rs.map((r) => r.cpuUsPerRequest)),
      cpuUsPerRequestByProcess: procs.map((t) => median(runs[t.name].map((r) => r.cpuUsPerRequest))),
      non2xx: rs.reduce((a, r) => a + r.non2xx, 0),
      rssAfter1sMb: median(procs.map((t) => startRss[t.name])),
      idleRssMb: median(procs.map((t) => idleRss[t.name])),
      idleRssMbByProcess: procs.map((t) => idleRss[t.name]),
      loadRssMb: procs[0].pid ? Math.max(...rs.map((r) => r.loadRss)) : undefined
    }]
  }))
}

/** The range of a ratio of CPU per request over the processes' own medians: how far noise alone moves it. */
function spreadOf (summary, a, b) {
  if (!summary[a] || !summary[b]) return null
  const [x, y] = [summary[a].cpuUsPerRequestByProcess, summary[b].cpuUsPerRequestByProcess]
  return [Math.min(...x) / Math.max(...y), Math.max(...x) / Math.min(...y)]
}

/**
 * The same ratio round by round (a round's slices lie within a minute of
 * each other, so slow drifts of the machine cancel out): median and range.
 * `combine` makes it another comparison of the two, a difference say.
 */
function byRoundOf (list, runs, a, b, combine = (x, y) => x / y) {
  const rounds = runs[list[0].name].length
  if (!list.some((t) => t.variant === a) || !list.some((t) => t.variant === b) || rounds === 0) return null
  const slice = (variant, r) => median(list.filter((t) => t.variant === variant).map((t) => runs[t.name][r]?.cpuUsPerRequest))
  const rs = Array.from({ length: rounds }, (_, r) => combine(slice(a, r), slice(b, r)))
  return { median: median(rs), min: Math.min(...rs), max: Math.max(...rs) }
}

/** bench/proof-cost.ts on the proxies' core: one DPoP proof's CPU, the sidecar's way and jose's. */
function proofCost () {
  const [c, a] = onCore(1, process.execPath, ['--import=./node_modules/@tapjs/typescript/dist/esm/import.mjs', 'bench/proof-cost.ts', DPOP || 'ES256'])
  const result = JSON.parse(execFileSync(c, a, { cwd: root, encoding: 'utf8' }))
  for (const [way, p] of Object.entries(result.ways)) console.error(`proof ${way}: ${p.medianUs.toFixed(1)} µs CPU (${p.minUs.toFixed(1)}–${p.maxUs.toFixed(1)})`)
  return result
}

function table (r) {
  const f = (x, d = 0) => (typeof x !== 'number' || !Number.isFinite(x)) ? 'n/a' : x.toFixed(d)
  const lines = [
    `# auth-sidecar benchmark (${r.date}, Node ${r.node})`,
    '',
    `${r.settings.ROUNDS} interleaved rounds × ${r.settings.SECONDS} s × ${r.settings.CONNECTIONS} connections, ${r.settings.PROCS} processes per Node proxy (one slice each per round, order turned each round); medians of all slices.${r.settings.NODE_FLAGS ? ` Sidecar started as the image starts it: \`node ${r.settings.NODE_FLAGS} dist/main.js\`.` : ''} CPU pinning: ${r.settings.pinning ? 'proxies on core 1, load and upstream on core 0' : 'off'}. Tokens live ${r.settings.TOKEN_SECONDS} s (${r.grants.duringRuns} grants during the rounds).`,
    '',
    `| target | req/s | p50 ms | p99 ms | proxy CPU µs/req | each process's median | RSS 1 s after first request MB | idle RSS (${r.settings.SETTLE_SECONDS} s after) MB | RSS under load MB | non-2xx |`,
    '|---|---|---|---|---|---|---|---|---|---|'
  ]
  for (const [name, s] of Object.entries(r.summary)) {
    lines.push(`| ${name} | ${f(s.rps)} | ${f(s.p50, 1)} | ${f(s.p99, 1)} | ${f(s.cpuUsPerRequest, 1)} | ${s.cpuUsPerRequestByProcess.map((x) => f(x, 1)).join(' / ')} | ${f(s.rssAfter1sMb)} | ${f(s.idleRssMb)}${s.idleRssMbByProcess.length > 1 ? ` (${s.idleRssMbByProcess.map((x) => f(x)).join(' / ')})` : ''} | ${f(s.loadRssMb)} | ${s.non2xx} |`)
  }
  const range = (x) => x === null ? '' : ` (${f(x[0], 2)}–${f(x[1], 2)} over the processes' medians)`
  const q = r.ratios
  lines.push('', '| ratio (auth-sidecar to ...) | value |', '|---|---|',
    `| throughput / direct | ${f(q.throughputToDirect, 2)} |`,
    `| throughput / bare proxy | ${f(q.throughputToBareProxy, 2)} |`,
    `| throughput / nginx | ${f(q.throughputToNginx, 2)} |`,
    `| CPU per request / bare proxy | ${f(q.cpuToBareProxy, 2)}${range(q.cpuToBareProxySpread)} |`,
    `| the same, round by round | ${q.cpuToBareProxyByRound ? `median ${f(q.cpuToBareProxyByRound.median, 2)}, ${f(q.cpuToBareProxyByRound.min, 2)}–${f(q.cpuToBareProxyByRound.max, 2)}` : 'n/a'} |`,
    `| CPU per request / previous design | ${f(q.cpuToPrevious, 2)}${range(q.cpuToPreviousSpread)} |`,
    `| the same, round by round | ${q.cpuToPreviousByRound ? `median ${f(q.cpuToPreviousByRound.median, 2)}, ${f(q.cpuToPreviousByRound.min, 2)}–${f(q.cpuToPreviousByRound.max, 2)}` : 'n/a'} |`,
    `| CPU per request / nginx | ${f(q.cpuToNginx, 2)} |`,
    `| upload MB/s / nginx | ${f(q.uploadToNginx, 2)} |`,
    `| download MB/s / nginx | ${f(q.downloadToNginx, 2)} |`)
  lines.push('', `| streaming ${r.settings.STREAM_MB} MB (median of ${r.settings.STREAM_REPS}) | upload MB/s | download MB/s | proxy CPU ms/GB up | proxy CPU ms/GB down | peak RSS MB | peak growth in a transfer MB |`, '|---|---|---|---|---|---|---|')
  for (const [name, s] of Object.entries(r.streaming)) {
    lines.push(`| ${name} | ${f(s.uploadMBps)} | ${f(s.downloadMBps)} | ${f(s.uploadCpuMsPerGb)} | ${f(s.downloadCpuMsPerGb)} | ${f(s.peakRssMb)} | ${f(s.peakGrowthMb)} |`)
  }
  lines.push('', '| token grants | req/s | requests | grants | per 100k requests | per minute |', '|---|---|---|---|---|---|')
  for (const g of r.grants.rates) lines.push(`| at ${g.rate} | ${f(g.rps)} | ${g.requests} | ${g.grants} | ${f(g.grantsPer100k, 1)} | ${f(g.grantsPerMinute, 1)} |`)
  if (r.dpop) {
    const d = r.dpop
    lines.push('', `| DPoP mode (${d.alg}) against bearer mode, rounds of their own | req/s | p50 ms | p99 ms | proxy CPU µs/req | each process's median | non-2xx |`, '|---|---|---|---|---|---|---|')
    for (const [name, x] of Object.entries(d.summary)) lines.push(`| ${name} | ${f(x.rps)} | ${f(x.p50, 1)} | ${f(x.p99, 1)} | ${f(x.cpuUsPerRequest, 1)} | ${x.cpuUsPerRequestByProcess.map((y) => f(y, 1)).join(' / ')} | ${x.non2xx} |`)
    lines.push('', `DPoP mode's CPU per request / bearer mode's: ${f(d.cpuToBearer, 2)}${range(d.cpuToBearerSpread)}; round by round median ${f(d.cpuToBearerByRound?.median, 2)}, ${f(d.cpuToBearerByRound?.min, 2)}–${f(d.cpuToBearerByRound?.max, 2)}.`)
  }
  if (r.routes) {
    const x = r.routes
    lines.push('', '| ten named routes, rounds of their own | req/s | p50 ms | p99 ms | proxy CPU µs/req | each process\'s median | non-2xx |', '|---|---|---|---|---|---|---|')
    for (const [name, y] of Object.entries(x.summary)) lines.push(`| ${name === 'auth-sidecar' ? 'one route' : name} | ${f(y.rps)} | ${f(y.p50, 1)} | ${f(y.p99, 1)} | ${f(y.cpuUsPerRequest, 1)} | ${y.cpuUsPerRequestByProcess.map((z) => f(z, 1)).join(' / ')} | ${y.non2xx} |`)
    lines.push('', `A named route's CPU per request / the default route's, same processes: ${f(x.namedToDefault, 2)}${range(x.namedToDefaultSpread)}; round by round median ${f(x.namedToDefaultByRound?.median, 2)}, ${f(x.namedToDefaultByRound?.min, 2)}–${f(x.namedToDefaultByRound?.max, 2)}. Against a one-route sidecar: ${f(x.namedToOneRoute, 2)}, round by round median ${f(x.namedToOneRouteByRound?.median, 2)}.`)
    lines.push('', `| idle RSS, ${r.settings.SETTLE_SECONDS} s after start | median MB | each process |`, '|---|---|---|')
    for (const [kind, v] of Object.entries(x.idleRssMb)) lines.push(`| ${kind} | ${f(median(v))} | ${v.map((z) => f(z)).join(' / ')} |`)
  }
  if (r.tls) {
    const x = r.tls
    lines.push('', '| an HTTPS upstream, rounds of their own | req/s | p50 ms | p99 ms | proxy CPU µs/req | each process\'s median | non-2xx |', '|---|---|---|---|---|---|---|')
    for (const [name, y] of Object.entries(x.summary)) lines.push(`| ${name} | ${f(y.rps)} | ${f(y.p50, 1)} | ${f(y.p99, 1)} | ${f(y.cpuUsPerRequest, 1)} | ${y.cpuUsPerRequestByProcess.map((z) => f(z, 1)).join(' / ')} | ${y.non2xx} |`)
    lines.push('', `With a client certificate, CPU per request / without: ${f(x.certificateToNone, 2)}${range(x.certificateToNoneSpread)}; round by round median ${f(x.certificateToNoneByRound?.median, 2)}, ${f(x.certificateToNoneByRound?.min, 2)}–${f(x.certificateToNoneByRound?.max, 2)}.`)
  }
  if (r.forward) {
    const x = r.forward
    lines.push('', '| forward proxy against PROXY_PORT, same sidecars, HTTPS upstream, rounds of their own | req/s | p50 ms | p99 ms | proxy CPU µs/req | each process\'s median | non-2xx |', '|---|---|---|---|---|---|---|')
    for (const [name, y] of Object.entries(x.summary)) lines.push(`| ${name} | ${f(y.rps)} | ${f(y.p50, 1)} | ${f(y.p99, 1)} | ${f(y.cpuUsPerRequest, 1)} | ${y.cpuUsPerRequestByProcess.map((z) => f(z, 1)).join(' / ')} | ${y.non2xx} |`)
    lines.push('', `Through the forward proxy, CPU per request / to PROXY_PORT, kept alive: ${f(x.forwardToReverse, 2)}${range(x.forwardToReverseSpread)}; round by round median ${f(x.forwardToReverseByRound?.median, 2)}, ${f(x.forwardToReverseByRound?.min, 2)}–${f(x.forwardToReverseByRound?.max, 2)} (target ≤ ${x.targets.forwardToReverse}).`)
    lines.push('', '| sidecar CPU per new connection (new-connection request less kept-alive request) | µs | round by round |', '|---|---|---|')
    for (const [kind, y] of Object.entries(x.newConnectionUs)) lines.push(`| ${kind} | ${f(y.us)} | ${y.byRound ? `median ${f(y.byRound.median)}, ${f(y.byRound.min)}–${f(y.byRound.max)}` : 'n/a'} |`)
    lines.push('', `| idle RSS, ${r.settings.SETTLE_SECONDS} s after one request | median MB | each process |`, '|---|---|---|')
    for (const [kind, v] of Object.entries(x.idleRssMb)) lines.push(`| ${kind} | ${f(median(v))} | ${v.map((z) => f(z)).join(' / ')} |`)
    lines.push('', `Forward proxy on less off: ${f(x.idleRssOnMinusOffMb, 1)} MB (target ≤ ${x.targets.idleRssOnMinusOffMb} MB).`)
  }
  if (r.tracing) {
    const x = r.tracing
    lines.push('', '| tracing, exporting over OTLP/HTTP, rounds of their own | req/s | p50 ms | p99 ms | proxy CPU µs/req | each process\'s median | spans exported per request | non-2xx |', '|---|---|---|---|---|---|---|---|')
    for (const [name, y] of Object.entries(x.summary)) lines.push(`| ${name} | ${f(y.rps)} | ${f(y.p50, 1)} | ${f(y.p99, 1)} | ${f(y.cpuUsPerRequest, 1)} | ${y.cpuUsPerRequestByProcess.map((z) => f(z, 1)).join(' / ')} | ${name in x.spansPerRequest ? f(x.spansPerRequest[name], 2) : '0'} | ${y.non2xx} |`)
    for (const [name, y] of Object.entries(x.toOff)) lines.push('', `${name[0].toUpperCase()}${name.slice(1)}, CPU per request / tracing off: ${f(y.ratio, 2)}${range(y.spread)}; round by round median ${f(y.byRound?.median, 2)}, ${f(y.byRound?.min, 2)}–${f(y.byRound?.max, 2)}${name === 'tracing on, 1 in 10 sampled' ? ` (target ≤ ${x.targets.sampledToOff})` : ''}.`)
  }
  if (r.proofs) {
    lines.push('', `| one DPoP proof (${r.proofs.count} per turn, ${r.proofs.turns} turns in alternation) | CPU µs per proof, median | range of the turns |`, '|---|---|---|')
    for (const [way, p] of Object.entries(r.proofs.ways)) lines.push(`| ${way} | ${f(p.medianUs, 1)} | ${f(p.minUs, 1)}–${f(p.maxUs, 1)} |`)
  }
  lines.push('', `Start-up to the first proxied 200, excluding the grant: ${f(r.startup.medianMs)} ms (median of ${r.startup.runs.length}); RSS one second after it: ${f(r.startup.rssAfter1sMb)} MB${r.startup.idleRssMb != null ? `; idle, ${r.settings.SETTLE_SECONDS} s after it (first start): ${f(r.startup.idleRssMb)} MB` : ''}.${r.previousStartup ? ` The previous build, started in turns with it: ${f(r.previousStartup.medianMs)} ms, ${f(r.previousStartup.rssAfter1sMb)} MB one second after.` : ''}`, '')
  return lines.join('\n')
}

main().catch((err) => { console.error(err); process.exit(1) })
