import t from 'tap'
import { applyPatch, httpsRequest, patchOf, podOf, reviewOf, validatePod } from '../helpers/admission.js'
import { INJECTED_IMAGE, logLine, startInjector } from '../helpers/injector.js'

/**
 * The built `node dist/main.js inject` as the API server calls it: HTTPS,
 * verified against the CA that issued its certificate, AdmissionReviews of
 * the shape the API server sends.
 */
const OPT_IN = { 'auth-sidecar.io/inject': 'true', 'auth-sidecar.io/config': 'orders-sidecar' }
const JSON_TYPE = { 'content-type': 'application/json' }
const TOO_LARGE = '9 MiB'
/** How a client sees a connection the server closed while the body was still being sent. */
const UPLOAD_CUT = ['EPIPE', 'ECONNRESET']

t.test('POST /mutate answers with the same uid, allowed, and a JSONPatch that makes a valid injected Pod', async (t) => {
  const { url, ca, run } = await startInjector(t)
  const pod = podOf(OPT_IN)
  const review = reviewOf(pod)
  const res = await httpsRequest(`${url}/mutate`, ca, { method: 'POST', headers: JSON_TYPE, body: JSON.stringify(review) })
  t.equal(res.status, 200)
  const answer = JSON.parse(res.body)
  t.equal(answer.apiVersion, 'admission.k8s.io/v1')
  t.equal(answer.kind, 'AdmissionReview')
  t.equal(answer.response.uid, review.request.uid, 'the request\'s uid')
  t.equal(answer.response.allowed, true)
  t.equal(answer.response.patchType, 'JSONPatch')
  const patched = applyPatch(pod, patchOf(answer)!)
  t.doesNotThrow(() => { validatePod(patched) })
  t.equal(patched.spec.initContainers[0].image, INJECTED_IMAGE, 'INJECT_IMAGE')
  const line = await logLine(run, 'sidecar injected')
  t.match(line, { event: 'admission', uid: review.request.uid, namespace: 'shop', pod: 'orders-7d9f8c6b5-*', injected: true })
  t.notOk(JSON.stringify(line).includes('orders-sidecar'), 'the log line holds no part of the pod')

  const plain = reviewOf(podOf(undefined))
  const unchanged = JSON.parse((await httpsRequest(`${url}/mutate`, ca, { method: 'POST', headers: JSON_TYPE, body: JSON.stringify(plain) })).body)
  t.same(unchanged.response, { uid: plain.request.uid, allowed: true }, 'a pod that did not opt in: no patch')
})

t.test('/healthz and /readyz answer over HTTPS; a plain HTTP client is not served', async (t) => {
  const { url, ca } = await startInjector(t)
  t.equal((await httpsRequest(`${url}/healthz`, ca)).status, 200)
  t.same(JSON.parse((await httpsRequest(`${url}/readyz`, ca)).body), { status: 'ready' })
  await t.rejects(fetch(url.replace('https:', 'http:') + '/healthz'), 'no HTTP answer on the HTTPS port')
})

t.test('a flood of bodies that are no Pod\'s AdmissionReview: each 400, the process lives on, the next good review is answered', async (t) => {
  const { url, ca, run } = await startInjector(t)
  const good = reviewOf(podOf(OPT_IN))
  const withRequest = (patch: Record<string, unknown>): string => JSON.stringify({ ...good, request: { ...good.request, ...patch } })
  const bad: Array<[string, { headers?: Record<string, string>, body?: string | Buffer }]> = [
    ['not JSON', { headers: JSON_TYPE, body: '{"apiVersion": ' }],
    ['an empty body', { headers: JSON_TYPE, body: '' }],
    ['a JSON array', { headers: JSON_TYPE, body: '[]' }],
    ['JSON null', { headers: JSON_TYPE, body: 'null' }],
    ['admission.k8s.io/v1beta1', { headers: JSON_TYPE, body: JSON.stringify({ ...good, apiVersion: 'admission.k8s.io/v1beta1' }) }],
    ['another kind of object', { headers: JSON_TYPE, body: JSON.stringify({ ...good, kind: 'ConversionReview' }) }],
    ['no request', { headers: JSON_TYPE, body: JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview' }) }],
    ['no uid', { headers: JSON_TYPE, body: withRequest({ uid: undefined }) }],
    ['a Deployment', { headers: JSON_TYPE, body: withRequest({ kind: { group: 'apps', version: 'v1', kind: 'Deployment' } }) }],
    ['a Pod subresource', { headers: JSON_TYPE, body: withRequest({ subResource: 'status' }) }],
    ['a Pod without containers', { headers: JSON_TYPE, body: withRequest({ object: { metadata: {}, spec: {} } }) }],
    ['containers that are not objects', { headers: JSON_TYPE, body: withRequest({ object: { metadata: { annotations: OPT_IN }, spec: { containers: [1, null] } } }) }],
    ['annotations that are not strings', { headers: JSON_TYPE, body: withRequest({ object: { metadata: { annotations: { 'auth-sidecar.io/inject': true } }, spec: { containers: [] } } }) }],
    ['a prototype-poisoning body', { headers: JSON_TYPE, body: '{"__proto__":{"allowed":false},"apiVersion":"admission.k8s.io/v1"}' }],
    ['text/plain', { headers: { 'content-type': 'text/plain' }, body: JSON.stringify(good) }],
    ['no content type', { body: JSON.stringify(good) }],
    ['form data', { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'a=b' }],
    [TOO_LARGE, { headers: JSON_TYPE, body: Buffer.alloc(9 * 1024 * 1024, 0x20) }]
  ]
  for (let round = 0; round < 5; round++) {
    const answers = await Promise.all(bad.map(async ([, o]) => await httpsRequest(`${url}/mutate`, ca, { method: 'POST', ...o }).catch((err: NodeJS.ErrnoException) => ({ status: 0, body: err.message, code: err.code }))))
    if (round > 0) continue
    answers.forEach((res, i) => {
      const [name] = bad[i]!
      // the server may answer 400 and close while the client is still sending a body past the limit: the client then sees the connection cut instead
      if (name === TOO_LARGE && res.status === 0) t.ok('code' in res && UPLOAD_CUT.includes(String(res.code)), `${name}: the connection closed before the upload ended (${res.body})`)
      else t.equal(res.status, 400, `${name}: 400`)
    })
    t.match(JSON.parse(answers[7]!.body), { error: 'bad_request', message: 'request.uid is missing' }, 'the message names the field')
  }
  t.equal(run.child.exitCode, null, 'still running')
  const pod = podOf(OPT_IN)
  const review = reviewOf(pod)
  const res = await httpsRequest(`${url}/mutate`, ca, { method: 'POST', headers: JSON_TYPE, body: JSON.stringify(review) })
  t.equal(res.status, 200)
  const answer = JSON.parse(res.body)
  t.match(answer, { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid: review.request.uid, allowed: true, patchType: 'JSONPatch' } }, 'a valid AdmissionReview')
  t.doesNotThrow(() => { validatePod(applyPatch(pod, patchOf(answer)!)) }, 'whose patch makes a valid Pod')
  t.equal((await httpsRequest(`${url}/mutate`, ca)).status, 404, 'GET /mutate: nothing there')
})

t.test('SIGTERM: the reviews in progress finish, it says so, exits 0', async (t) => {
  // no delay before the close: test/inject/shutdown-drain.test.ts has it
  const { run } = await startInjector(t, { INJECT_SHUTDOWN_DELAY_MS: '0' })
  run.child.kill('SIGTERM')
  t.equal(await run.exited, 0)
  t.ok(run.stdout.some((l) => l.includes('"msg":"stopped"')))
})
