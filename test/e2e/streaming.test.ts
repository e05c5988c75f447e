import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { Agent, request as httpRequest } from 'node:http'
import t, { type Test } from 'tap'
import { send, until } from '../helpers/build.js'
import { memoryOf, root, startSidecar } from '../helpers/process.js'

/** Body size for the flat-memory runs; STREAM_MB=1024 for the full gigabyte. */
const STREAM_MB = Number(process.env.STREAM_MB ?? 256)
/** Allowed growth of the proxy's resident memory while streaming. */
const MAX_GROWTH_MB = 64
/**
 * From this Node on, V8 answers external-memory pressure (the garbage
 * ArrayBuffers of socket reads) by starting incremental marking only, no
 * longer with a scavenge at once, so every Node process that moves bytes
 * through sockets grows further while streaming. There the bound is what a
 * raw TCP pipe grows for the same transfer, measured beside the sidecar, plus
 * PROXY_HEADROOM_MB: a proxy that buffered the body still fails it by far.
 */
const NODE_FLOOR_FROM_MAJOR = 24
const PROXY_HEADROOM_MB = 24

const chunk = Buffer.alloc(1024 * 1024, 97)

/** Samples the child's RSS while `work` runs; returns the peak. */
async function peakRss (pid: number, work: () => Promise<void>): Promise<number> {
  let peak = memoryOf(pid).rssMb
  const timer = setInterval(() => { peak = Math.max(peak, memoryOf(pid).rssMb) }, 50)
  try {
    await work()
  } finally {
    clearInterval(timer)
  }
  return Math.max(peak, memoryOf(pid).rssMb)
}

/** The sidecar's count of full (mark-compact) garbage collections, from its /metrics. */
async function majorGcs (adminUrl: string): Promise<number> {
  const { body } = await send(`${adminUrl}/metrics`)
  if (!body.includes('# TYPE nodejs_gc_duration_seconds histogram')) throw new Error('the GC metric is missing from /metrics')
  const m = /^nodejs_gc_duration_seconds_count\{kind="major"\} (\d+)$/m.exec(body)
  return m === null ? 0 : Number(m[1])
}

function upload (url: string, mb: number, agent: Agent): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: 'POST', agent, headers: { 'content-type': 'application/octet-stream', 'content-length': mb * chunk.length } }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode ?? 0))
    })
    req.on('error', reject)
    let sent = 0
    const pump = (): void => {
      while (sent < mb) {
        sent++
        if (!req.write(chunk)) { req.once('drain', pump); return }
      }
      req.end()
    }
    pump()
  })
}

function download (url: string, agent: Agent): Promise<number> {
  return new Promise((resolve, reject) => {
    httpRequest(url, { agent }, (res) => {
      let bytes = 0
      res.on('data', (c: Buffer) => { bytes += c.length })
      res.on('end', () => resolve(bytes))
      res.on('error', reject)
    }).on('error', reject).end()
  })
}

interface Growth { upload: number, download: number }

/** RSS growth of the process `pid` during one upload and one download of STREAM_MB through `url`. */
async function growthOf (pid: number, url: string, agent: Agent): Promise<Growth> {
  for (let i = 0; i < 20; i++) await send(`${url}/warm`) // JIT and pools warmed, as for the sidecar
  const baseline = memoryOf(pid).rssMb
  const up = await peakRss(pid, async () => { await upload(`${url}/upload`, STREAM_MB, agent) })
  const down = await peakRss(pid, async () => { await download(`${url}/_bytes/${STREAM_MB * chunk.length}`, agent) })
  return { upload: up - baseline, download: down - baseline }
}

/**
 * The growth allowed to the sidecar for each direction: MAX_GROWTH_MB, or
 * from NODE_FLOOR_FROM_MAJOR on, what a raw TCP pipe on this Node
 * (test/helpers/tcp-pipe.mjs) grows for the same transfers, plus
 * PROXY_HEADROOM_MB.
 */
async function growthBound (t: Test, upstreamUrl: string): Promise<Growth & { pipe?: Growth }> {
  if (Number(process.versions.node.split('.')[0]) < NODE_FLOOR_FROM_MAJOR) return { upload: MAX_GROWTH_MB, download: MAX_GROWTH_MB }
  // without tap's hooks (NODE_OPTIONS), as the sidecar runs here
  const child = spawn(process.execPath, [`${root}test/helpers/tcp-pipe.mjs`], { env: { PATH: process.env.PATH ?? '', UPSTREAM: upstreamUrl }, stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { child.kill('SIGKILL') })
  const [line] = await once(child.stdout!, 'data') as [Buffer]
  const { port } = JSON.parse(String(line)) as { port: number }
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  try {
    const pipe = await growthOf(child.pid!, `http://127.0.0.1:${port}`, agent)
    return { upload: pipe.upload + PROXY_HEADROOM_MB, download: pipe.download + PROXY_HEADROOM_MB, pipe }
  } finally {
    agent.destroy()
    child.kill('SIGKILL')
  }
}

t.test(`${STREAM_MB} MB up and down with the proxy's memory flat; keep-alive reuse afterwards`, async (t) => {
  // untracked: the product's memory, without tap's hooks in the child (their
  // loader thread is tap's memory, and it grows while the sidecar works).
  const s = await startSidecar(t, {}, {}, true, { untracked: true })
  const pid = s.run.child.pid!
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => agent.destroy())
  const bound = await growthBound(t, s.upstream.url)
  const pipeSaid = (grew: number | undefined): string => grew === undefined ? '' : `; a raw Node pipe grew ${grew.toFixed(0)}`
  for (let i = 0; i < 20; i++) await send(`${s.proxyUrl}/warm`) // JIT and pools warmed
  const baseline = memoryOf(pid).rssMb
  const majorGcsBefore = await majorGcs(s.adminUrl)

  const upPeak = await peakRss(pid, async () => {
    t.equal(await upload(`${s.proxyUrl}/upload`, STREAM_MB, agent), 200)
  })
  // Reported, not asserted: how many full GCs an upload costs depends on how
  // fast the client sends (`npm run bench` is the judge).
  t.comment(`upload: ${await majorGcs(s.adminUrl) - majorGcsBefore} full GCs for ${STREAM_MB} MB`)
  const got = s.upstream.received.at(-1)!
  t.equal(got.bodyBytes, STREAM_MB * chunk.length, 'every byte arrived')
  t.ok(got.tokenValid)
  t.ok(upPeak - baseline < bound.upload, `upload: RSS ${baseline.toFixed(0)} → peak ${upPeak.toFixed(0)} MB (under ${bound.upload.toFixed(0)}${pipeSaid(bound.pipe?.upload)})`)

  const next = await download(`${s.proxyUrl}/after-upload`, agent)
  t.ok(next > 0, 'a GET on the same keep-alive connection after the upload works')

  const downPeak = await peakRss(pid, async () => {
    t.equal(await download(`${s.proxyUrl}/_bytes/${STREAM_MB * chunk.length}`, agent), STREAM_MB * chunk.length)
  })
  t.ok(downPeak - baseline < bound.download, `download: RSS ${baseline.toFixed(0)} → peak ${downPeak.toFixed(0)} MB (under ${bound.download.toFixed(0)}${pipeSaid(bound.pipe?.download)})`)
})

t.test('a client that aborts mid-upload aborts the upstream request promptly', async (t) => {
  // untracked: with tap's hooks in the child the abort took several times
  // longer, near the bound; the bound is the product's, not tap's
  const s = await startSidecar(t, {}, {}, true, { untracked: true })
  const req = httpRequest(`${s.proxyUrl}/abort-me`, { method: 'POST', agent: false, headers: { 'content-length': 100 * chunk.length } })
  req.on('error', () => {})
  for (let i = 0; i < 5; i++) req.write(chunk)
  const until = Date.now() + 5_000
  while (s.upstream.received.length === 0 && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 10))
  const abortedAt = Date.now()
  req.destroy()
  while (s.upstream.received[0]?.abortedAt === undefined && Date.now() < abortedAt + 3_000) await new Promise((resolve) => setTimeout(resolve, 10))
  const seen = s.upstream.received[0]?.abortedAt
  t.ok(seen !== undefined && seen - abortedAt < 1_000, `upstream request aborted ${seen === undefined ? 'never' : `${seen - abortedAt} ms`} after the client left`)
  t.equal((await send(`${s.proxyUrl}/after`)).status, 200, 'and the proxy serves on')
})

t.test('a quiet event stream is not cut by the timeout for response headers; a stalled one is cut by the idle timeout', async (t) => {
  const s = await startSidecar(t, { UPSTREAM_TIMEOUT_MS: '300', UPSTREAM_IDLE_TIMEOUT_MS: '2500' })
  const quiet = await send(`${s.proxyUrl}/_sse/3/1000`)
  t.equal(quiet.status, 200)
  t.equal(quiet.body, 'data: event 1\n\ndata: event 2\n\ndata: event 3\n\n', 'three events, a second apart, all delivered')

  // headers at once, the first event only after 4 s
  const started = Date.now()
  const stalled = await new Promise<{ status: number, body: string, ending: string, ms: number }>((resolve) => {
    const req = httpRequest(`${s.proxyUrl}/_sse/2/4000`, { agent: false }, (res) => {
      let body = ''
      res.on('data', (c: Buffer) => { body += c.toString() })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, ending: 'complete', ms: Date.now() - started }))
      res.on('error', (err: NodeJS.ErrnoException) => resolve({ status: res.statusCode ?? 0, body, ending: err.code ?? err.message, ms: Date.now() - started }))
    })
    req.on('error', (err: NodeJS.ErrnoException) => resolve({ status: 0, body: '', ending: err.code ?? err.message, ms: Date.now() - started }))
    req.end()
  })
  t.equal(stalled.status, 200, 'the stream had begun')
  t.equal(stalled.body, '', 'no event came through')
  t.equal(stalled.ending, 'ECONNRESET', 'the body was cut, not ended as if complete')
  t.ok(stalled.ms >= 2_400 && stalled.ms < 4_000, `cut after ${stalled.ms} ms of silence (UPSTREAM_IDLE_TIMEOUT_MS 2500), before the event at 4 s`)
  await until(() => s.run.stdout.some((l) => l.includes('upstream closed the connection in the middle of its answer')) && s.run.stdout.some((l) => l.includes('"path":"/_sse/2/4000"')))
  t.match(s.run.stdout.find((l) => l.includes('"path":"/_sse/2/4000"')), /"status":502/, 'logged as the upstream\'s failure')
})
