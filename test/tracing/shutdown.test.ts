import { createServer, type IncomingMessage, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { send, until } from '../helpers/build.js'
import { startSidecar, type RunningSidecar } from '../helpers/process.js'
import { FLUSH_BACKSTOP_MARGIN_MS, FLUSH_MIN_MS, flushBudgetMs } from '../../src/tracing/tracing.js'

// The built sidecar exporting to a collector that takes every request and
// never answers: its exporter would wait out its own 10 s timeout.

const GRACE_MS = 1_500
const TOKEN_TIMEOUT_MS = 2_000
/** main.ts's backstop: past it, the process is killed with exit 1 */
const BACKSTOP_MS = GRACE_MS + TOKEN_TIMEOUT_MS + 2_000
/** what a stop may take, from SIGTERM to the exit: the grace, tracing's least flush and room for a busy machine */
const STOP_BOUND_MS = GRACE_MS + FLUSH_MIN_MS + 1_500

/** An OTLP/HTTP endpoint that reads each export and never answers it. */
async function hangingCollector (t: Test): Promise<{ url: string, requests: IncomingMessage[] }> {
  const requests: IncomingMessage[] = []
  const server: Server = createServer((req) => {
    requests.push(req)
    req.resume()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests }
}

async function sidecarExportingTo (t: Test, collector: string): Promise<RunningSidecar> {
  return await startSidecar(t, {
    OTEL_TRACES_EXPORTER: 'otlp',
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${collector}/v1/traces`,
    OTEL_BSP_SCHEDULE_DELAY: '100',
    SHUTDOWN_GRACE_MS: String(GRACE_MS),
    TOKEN_TIMEOUT_MS: String(TOKEN_TIMEOUT_MS)
  })
}

/** SIGTERM, and the exit code and the time to the process's exit event. */
async function stop (s: RunningSidecar): Promise<{ code: number | null, ms: number }> {
  const started = performance.now()
  s.run.child.kill('SIGTERM')
  const code = await s.run.exited
  return { code, ms: performance.now() - started }
}

function lines (s: RunningSidecar): Array<Record<string, unknown>> {
  return s.run.stdout.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>)
}

t.test('a collector that never answers, a request outliving the grace: SIGTERM still exits 0 with the stopped line, soon after the grace', { timeout: 60_000 }, async (t) => {
  const collector = await hangingCollector(t)
  const s = await sidecarExportingTo(t, collector.url)
  // the grant's span went out on schedule: an export is hanging when the signal comes
  await until(() => collector.requests.length > 0, 10_000)
  const slow = send(`${s.proxyUrl}/_slow/8000`).catch(() => undefined)
  await until(() => s.upstream.received.some((r) => r.url.includes('/_slow/')), 10_000)

  const { code, ms } = await stop(s)
  await slow
  t.equal(code, 0, `exit 0, not the backstop's 1 (${BACKSTOP_MS} ms): ${s.run.stderr.join('')}`)
  t.ok(lines(s).some((l) => l.msg === 'stopped'), 'the stopped line was written')
  t.ok(lines(s).some((l) => l.msg === 'shutdown grace period over: cutting the requests still in progress'), 'the request did outlive the grace')
  t.ok(lines(s).some((l) => typeof l.msg === 'string' && l.msg.startsWith('tracing: the exporter did not finish')), 'the spans that could not be sent are said to be dropped')
  t.ok(ms < STOP_BOUND_MS, `stopped in ${Math.round(ms)} ms, within the grace (${GRACE_MS} ms) and ${STOP_BOUND_MS - GRACE_MS} ms more`)
})

t.test('a collector that never answers, nothing in flight: SIGTERM exits 0 within the grace period, not the exporter\'s 10 s', { timeout: 60_000 }, async (t) => {
  const collector = await hangingCollector(t)
  const s = await sidecarExportingTo(t, collector.url)
  await until(() => collector.requests.length > 0, 10_000)
  t.equal((await send(`${s.proxyUrl}/orders`)).status, 200)

  const { code, ms } = await stop(s)
  t.equal(code, 0, s.run.stderr.join(''))
  t.ok(lines(s).some((l) => l.msg === 'stopped'), 'the stopped line was written')
  t.ok(ms < GRACE_MS + 1_500, `stopped in ${Math.round(ms)} ms: the grace (${GRACE_MS} ms) bounds the last export`)
})

t.test('the last export\'s budget: what is left of the grace, at least a second, never into the backstop\'s margin', async (t) => {
  const backstop = 10_000 + 10_000 + 2_000
  t.equal(flushBudgetMs(10_000, backstop, 200), 9_800, 'the requests ended early: the rest of the grace')
  t.equal(flushBudgetMs(10_000, backstop, 10_050), FLUSH_MIN_MS, 'a request ran to the grace\'s end: the least flush')
  t.equal(flushBudgetMs(0, 2_000 + 2_000, 10), FLUSH_MIN_MS, 'no grace at all: still the least flush')
  t.equal(flushBudgetMs(10_000, backstop, 21_000), backstop - FLUSH_BACKSTOP_MARGIN_MS - 21_000, 'the session took its time: what is left before the backstop\'s margin')
  t.equal(flushBudgetMs(10_000, backstop, 23_000), 0, 'past the backstop\'s margin: nothing')
})
