import { once } from 'node:events'
import { Agent, request } from 'node:https'
import t, { type Test } from 'tap'
import { applyPatch, httpsRequest, patchOf, podOf, reviewOf, validatePod } from '../helpers/admission.js'
import { logLine, startInjector } from '../helpers/injector.js'

/**
 * The built `node dist/main.js inject` on SIGTERM: /readyz turns 503 at
 * once, so that the webhook leaves the Service's endpoints, while /mutate
 * is still answered for INJECT_SHUTDOWN_DELAY_MS, for the API server that
 * has not noticed yet; a second signal cuts that short. Meanwhile every
 * answer closes its keep-alive connection, so that the API server's next
 * one goes to another replica.
 */
const OPT_IN = { 'auth-sidecar.io/inject': 'true', 'auth-sidecar.io/config': 'orders-sidecar' }
const WAITING = 'shutting down: /readyz answers 503'

/** POST /mutate with a review of an opted-in pod; its answer checked as the API server would use it. */
async function reviewed (t: Test, url: string, ca: string): Promise<void> {
  const pod = podOf(OPT_IN)
  const review = reviewOf(pod)
  const res = await httpsRequest(`${url}/mutate`, ca, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(review) })
  t.equal(res.status, 200, '/mutate answered')
  const answer = JSON.parse(res.body)
  t.match(answer, { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid: review.request.uid, allowed: true, patchType: 'JSONPatch' } })
  t.doesNotThrow(() => { validatePod(applyPatch(pod, patchOf(answer)!)) }, 'its patch makes a valid Pod')
}

/** The index of the first stdout line with `msg`; -1 when there is none. */
const indexOf = (lines: string[], msg: string): number => lines.findIndex((l) => l.includes(`"msg":"${msg}`))

t.test('during the delay /readyz is 503 and /mutate still served; a second signal ends it, then the server closes and the process exits 0', async (t) => {
  const { url, ca, run } = await startInjector(t, { INJECT_SHUTDOWN_DELAY_MS: '60000' })
  t.equal((await httpsRequest(`${url}/readyz`, ca)).status, 200, 'ready before')
  run.child.kill('SIGTERM')
  t.match(await logLine(run, WAITING), { signal: 'SIGTERM', delayMs: 60000 })
  const readyz = await httpsRequest(`${url}/readyz`, ca)
  t.equal(readyz.status, 503, '/readyz: 503 at once')
  t.same(JSON.parse(readyz.body), { status: 'not_ready', reason: 'shutting down' })
  t.equal((await httpsRequest(`${url}/healthz`, ca)).status, 200, '/healthz still 200: the kubelet does not restart it meanwhile')
  await reviewed(t, url, ca)
  await reviewed(t, url, ca)
  t.equal(run.child.exitCode, null, 'still running: the delay is not over')

  const second = performance.now()
  run.child.kill('SIGINT')
  t.equal(await run.exited, 0, 'exits 0')
  t.ok(performance.now() - second < 10_000, 'well before the 60 s delay')
  t.match(await logLine(run, 'second signal: the delay ends now'), { signal: 'SIGINT' })
  const finishing = indexOf(run.stdout, 'shutting down: finishing the reviews in progress')
  t.ok(finishing > indexOf(run.stdout, 'second signal'), 'the server closes after the wait ends')
  t.ok(indexOf(run.stdout, 'stopped') > finishing, 'stopped last')
  await t.rejects(httpsRequest(`${url}/healthz`, ca), 'nothing listens any more')
})

t.test('with no second signal the delay runs out by itself: the server closes and the process exits 0', async (t) => {
  const { url, ca, run } = await startInjector(t, { INJECT_SHUTDOWN_DELAY_MS: '1500' })
  const signalled = performance.now()
  run.child.kill('SIGTERM')
  t.match(await logLine(run, WAITING), { signal: 'SIGTERM', delayMs: 1500 })
  t.equal(await run.exited, 0, 'exits 0')
  // the delay's timer starts when the process gets the signal, after kill() returned
  t.ok(performance.now() - signalled >= 1450, 'not before the delay')
  t.match(await logLine(run, 'shutting down: finishing the reviews in progress'), { signal: 'SIGTERM' })
  t.equal(indexOf(run.stdout, 'second signal'), -1)
  t.ok(indexOf(run.stdout, 'stopped') > indexOf(run.stdout, WAITING))
  await t.rejects(httpsRequest(`${url}/healthz`, ca), 'nothing listens any more')
})

t.test('INJECT_SHUTDOWN_DELAY_MS=0: no wait, the server closes at once', async (t) => {
  const { run } = await startInjector(t, { INJECT_SHUTDOWN_DELAY_MS: '0' })
  run.child.kill('SIGTERM')
  t.equal(await run.exited, 0)
  t.match(await logLine(run, 'shutting down: finishing the reviews in progress'), { signal: 'SIGTERM' })
  t.equal(indexOf(run.stdout, WAITING), -1, 'no delay announced')
  t.ok(indexOf(run.stdout, 'stopped') >= 0)
})

interface KeptAlive {
  status: number
  connection: string | undefined
  body: string
  reused: boolean
  /** resolves when the connection the answer came on closes */
  closed: Promise<unknown>
}

/**
 * One request through a keep-alive agent. With `beforeBody` the body is
 * held back until it resolves, and it is called once the server has sent
 * 100 Continue: the server has read the request's headers by then, so the
 * connection is busy, not idle.
 */
async function keptAlive (agent: Agent, url: string, o: { method?: string, body?: string, beforeBody?: () => Promise<void> } = {}): Promise<KeptAlive> {
  return await new Promise((resolve, reject) => {
    const headers: Record<string, string> = o.body === undefined ? {} : { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(o.body)) }
    if (o.beforeBody !== undefined) headers.expect = '100-continue'
    const req = request(url, { method: o.method ?? 'GET', headers, agent }, (res) => {
      // listened for now: the socket goes back to the agent, or closes, as the answer ends
      const closed = once(res.socket, 'close')
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => { resolve({ status: res.statusCode!, connection: res.headers.connection, body: Buffer.concat(chunks).toString('utf8'), reused: req.reusedSocket, closed }) })
      res.on('error', reject)
    })
    req.on('error', reject)
    if (o.beforeBody === undefined) req.end(o.body)
    else req.on('continue', () => { o.beforeBody!().then(() => req.end(o.body), reject) })
  })
}

/** A review of an opted-in pod, and a check of its answer as the API server would use it. */
function review (): { body: string, check: (t: Test, body: string) => void } {
  const pod = podOf(OPT_IN)
  const r = reviewOf(pod)
  return {
    body: JSON.stringify(r),
    check: (t, body) => {
      const answer = JSON.parse(body)
      t.match(answer, { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid: r.request.uid, allowed: true, patchType: 'JSONPatch' } })
      t.doesNotThrow(() => { validatePod(applyPatch(pod, patchOf(answer)!)) }, 'its patch makes a valid Pod')
    }
  }
}

t.test('during the delay keep-alive connections are let go: idle ones closed at once, busy ones after their answer, new ones after their first', async (t) => {
  const { url, ca, run } = await startInjector(t, { INJECT_SHUTDOWN_DELAY_MS: '60000' })
  const busy = new Agent({ keepAlive: true, maxSockets: 1, ca })
  const idle = new Agent({ keepAlive: true, maxSockets: 1, ca })
  const fresh = new Agent({ keepAlive: true, maxSockets: 1, ca })
  t.teardown(() => { busy.destroy(); idle.destroy(); fresh.destroy() })

  const first = await keptAlive(busy, `${url}/readyz`)
  t.equal(first.connection, 'keep-alive', 'before the signal the connection is kept')
  const resting = await keptAlive(idle, `${url}/healthz`)
  t.equal(resting.connection, 'keep-alive')

  // a review on the first connection, its headers read before the signal and its body sent after
  const during = review()
  const answered = await keptAlive(busy, `${url}/mutate`, {
    method: 'POST',
    body: during.body,
    beforeBody: async () => {
      run.child.kill('SIGTERM')
      await logLine(run, WAITING)
    }
  })
  t.ok(answered.reused, 'the connection opened before the signal')
  t.equal(answered.status, 200)
  t.equal(answered.connection, 'close', 'its next answer closes it')
  during.check(t, answered.body)
  await answered.closed
  await resting.closed
  t.pass('the idle connection was closed by the server')

  // a connection opened during the delay still gets a review answered, and is closed after it
  const late = review()
  const lateAnswer = await keptAlive(fresh, `${url}/mutate`, { method: 'POST', body: late.body })
  t.equal(lateAnswer.status, 200, '/mutate still answered')
  t.equal(lateAnswer.connection, 'close')
  late.check(t, lateAnswer.body)
  await lateAnswer.closed
  t.equal(run.child.exitCode, null, 'all of it before the server closes')
  t.equal(indexOf(run.stdout, 'shutting down: finishing the reviews in progress'), -1)

  run.child.kill('SIGTERM')
  t.equal(await run.exited, 0)
})
