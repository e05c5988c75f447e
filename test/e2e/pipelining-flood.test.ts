import { spawn } from 'node:child_process'
import { connect, type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { TokenServer } from '../../dev/token-server.js'
import { PIPELINE_DEPTH } from '../../src/proxy/admission.js'
import { send } from '../helpers/build.js'
import { E2E_PASSWORD, imageNodeArgs, memoryOf, root, spawnSidecar, startSidecar, untilReady, type Launch, type SpawnedSidecar } from '../helpers/process.js'

/** Requests in the flood (FLOOD_REQUESTS=100000 for a larger run). */
const FLOOD_REQUESTS = Number(process.env.FLOOD_REQUESTS ?? 20_000)
/** The bound on the process's growth during a flood. */
const BOUND_MB = 64

const UNTRACKED: Launch = { untracked: true }

const sleep = async (ms: number): Promise<void> => await new Promise((resolve) => setTimeout(resolve, ms))

/**
 * The sidecar in front of the bench's upstream, a process of its own that
 * answers at once: the flood is worked through as fast as this machine can,
 * which is what grows a process.
 */
async function beforeFastUpstream (t: Test, env: Record<string, string>, launch: Launch): Promise<SpawnedSidecar> {
  const upstream = spawn(process.execPath, ['bench/upstream.mjs'], { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { upstream.kill('SIGKILL') })
  const { port } = await new Promise<{ port: number }>((resolve) => upstream.stdout.once('data', (d: Buffer) => resolve(JSON.parse(String(d).split('\n')[0]!) as { port: number })))
  const tokenServer = new TokenServer({ users: { 'service-user': E2E_PASSWORD } })
  await tokenServer.listen()
  t.teardown(async () => { await tokenServer.close() })
  const s = await spawnSidecar(t, `http://127.0.0.1:${port}`, tokenServer.url, E2E_PASSWORD, { ACCESS_LOG: 'false', ...env }, launch)
  await untilReady(s)
  return s
}

/**
 * One connection that sends `requests` GETs of `path` and reads nothing: the
 * sidecar's RSS meanwhile (sampled every 100 ms for `watchMs`) and whether
 * its admin port still answers.
 */
async function flood (s: SpawnedSidecar, path: string, requests: number, watchMs: number): Promise<{ socket: Socket, baseMb: number, peakMb: number, endMb: number, adminStatus: number }> {
  const pid = s.run.child.pid!
  // warm: the first requests compile the request path
  for (let i = 0; i < 300; i++) await send(`${s.proxyUrl}/warm`)
  await sleep(1_500)
  const baseMb = memoryOf(pid).rssMb
  let peakMb = baseMb
  const timer = setInterval(() => { peakMb = Math.max(peakMb, memoryOf(pid).rssMb) }, 100)
  const socket = connect(Number(new URL(s.proxyUrl).port), '127.0.0.1')
  socket.pause() // reads nothing
  await new Promise((resolve) => socket.once('connect', resolve))
  const batch = `GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`.repeat(1_000)
  for (let sent = 0; sent < requests; sent += 1_000) {
    // the sidecar stops reading: the kernel's buffers fill and the writes queue here
    if (!socket.write(batch)) await sleep(5)
  }
  await sleep(watchMs)
  const adminStatus = (await send(`${s.adminUrl}/healthz`)).status
  clearInterval(timer)
  const endMb = memoryOf(pid).rssMb
  return { socket, baseMb, peakMb: Math.max(peakMb, endMb), endMb, adminStatus }
}

const growth = (r: { baseMb: number, peakMb: number, endMb: number }): string =>
  `RSS ${r.baseMb.toFixed(0)} MB before, peak +${(r.peakMb - r.baseMb).toFixed(0)} MB, +${(r.endMb - r.baseMb).toFixed(0)} MB at the end`

t.test(`${FLOOD_REQUESTS} pipelined requests on one connection that reads nothing grow the sidecar by less than ${BOUND_MB} MB (started as the image starts it)`, async (t) => {
  const s = await beforeFastUpstream(t, {}, { ...UNTRACKED, nodeArgs: imageNodeArgs() })
  const r = await flood(s, '/item', FLOOD_REQUESTS, 5_000)
  t.comment(growth(r))
  t.ok(r.peakMb - r.baseMb < BOUND_MB, `peak growth ${(r.peakMb - r.baseMb).toFixed(0)} MB`)
  t.equal(r.adminStatus, 200, 'the admin port answers')
  r.socket.destroy()
  await sleep(500)
  t.equal((await send(`${s.proxyUrl}/after`)).status, 200, 'the flood gone, the proxy serves')
})

t.test('the flood is read as it is answered: at most PIPELINE_DEPTH of its requests at the upstream at once, the rest never read', async (t) => {
  const s = await startSidecar(t, { ACCESS_LOG: 'false' }, {}, true, { untracked: true })
  const r = await flood(s, '/_slow/10', FLOOD_REQUESTS, 3_000)
  t.comment(`${growth(r)}; ${s.upstream.received.length - 300} of the flood forwarded`)
  t.ok(s.upstream.maxInFlight <= PIPELINE_DEPTH, `at most ${s.upstream.maxInFlight} at the upstream at once`)
  t.ok(s.upstream.received.length - 300 < FLOOD_REQUESTS / 2, 'most of the flood not forwarded yet')
  t.equal(r.adminStatus, 200, 'the admin port answers')
  const forwarded = s.upstream.received.length
  r.socket.destroy()
  await sleep(1_000)
  // Reading is stopped, so the sidecar learns that the client left when it
  // next writes an answer: until then the requests in flight (at most
  // PIPELINE_DEPTH) and those their answers let in may still go; what it held
  // does not.
  t.ok(s.upstream.received.length - forwarded <= 2 * PIPELINE_DEPTH, `the client gone, what it sent is dropped (${s.upstream.received.length - forwarded} more forwarded)`)
  t.equal((await send(`${s.proxyUrl}/after`)).status, 200)
})

t.test('plain `node dist/main.js`, three times the flood: V8\'s own slack on top (its heap sizes differ by Node version), but bounded', async (t) => {
  const s = await beforeFastUpstream(t, {}, { untracked: true })
  const r = await flood(s, '/item', 3 * FLOOD_REQUESTS, 3_000)
  r.socket.destroy()
  t.comment(`${3 * FLOOD_REQUESTS}: ${growth(r)}`)
  // Without the image's cap on V8's young generation, Node 22 and later size
  // it from the machine's memory: the bound is wider here.
  t.ok(r.peakMb - r.baseMb < 3 * BOUND_MB, `peak growth ${(r.peakMb - r.baseMb).toFixed(0)} MB`)
  t.equal(r.adminStatus, 200)
})
