import { request as httpRequest } from 'node:http'
import { SpanKind } from '@opentelemetry/api'
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base'
import t, { type Test } from 'tap'
import { startOtel } from '../../src/tracing/otel.js'
import { build, CLIENT_SECRET, PASSWORD, send, until, type Harness } from '../helpers/build.js'

// One SDK per process (it registers itself globally): every test shares it
// and looks at the spans of its own traces.
const exporter = new InMemorySpanExporter()
const tracing = startOtel({ serviceName: 'auth-sidecar', spanProcessors: [new SimpleSpanProcessor(exporter)] })
t.teardown(async () => await tracing.shutdown(10_000))

const CLIENT_TRACE = '0af7651916cd43dd8448eb211c80319c'
const CLIENT_SPAN = 'b7ad6b7169203331'

function spans (): ReadableSpan[] {
  return exporter.getFinishedSpans()
}
function parentOf (span: ReadableSpan): string | undefined {
  return span.parentSpanContext?.spanId
}
function ids (span: ReadableSpan): { trace: string, span: string } {
  const c = span.spanContext()
  return { trace: c.traceId, span: c.spanId }
}

/** Every attribute of every span, and every link's, as one text. */
function everything (): string {
  return JSON.stringify(spans().map((s) => ({ name: s.name, attributes: s.attributes, links: s.links, events: s.events })))
}

/** The secrets a span must never hold: the credentials, the tokens issued, a query. */
function assertNoSecrets (t: Test, h: Harness, extra: string[] = []): void {
  const text = everything()
  const tokens = h.tokenServer.grants.flatMap((g) => [g.form.refresh_token, g.form.client_assertion]).filter((v): v is string => v !== undefined)
  const held = h.app.credential.current()?.header.split(' ')[1]
  for (const secret of [PASSWORD, CLIENT_SECRET, ...tokens, ...(held === undefined ? [] : [held]), ...extra]) {
    t.notOk(text.includes(secret), `no span holds ${secret.slice(0, 12)}...`)
  }
  for (const s of spans()) {
    t.notOk('url.query' in s.attributes, `${s.name}: no query`)
    t.notMatch(String(s.attributes['url.path'] ?? ''), /\?/, `${s.name}: url.path without a query`)
    if (s.kind === SpanKind.CLIENT) t.notMatch(String(s.attributes['url.full']), /[?#]/, `${s.name}: url.full without a query`)
    else t.notOk('url.full' in s.attributes, `${s.name}: url.full on CLIENT spans only`)
  }
}

t.test('a request: a SERVER span continuing the client\'s trace, a CLIENT span whose traceparent goes upstream, the ids in the access line', async (t) => {
  exporter.reset()
  const h = await build(t, {}, {}, { tracing })
  await until(() => h.app.credential.ready())
  const res = await send(`${h.proxyUrl}/things/1?q=s3cr3t-query`, { headers: { traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`, tracestate: 'app=1' } })
  t.equal(res.status, 200)
  await until(() => spans().some((s) => s.kind === SpanKind.SERVER))
  const server = spans().find((s) => s.kind === SpanKind.SERVER)!
  const client = spans().find((s) => s.kind === SpanKind.CLIENT && ids(s).trace === CLIENT_TRACE)!
  t.equal(ids(server).trace, CLIENT_TRACE, 'the client\'s trace')
  t.equal(parentOf(server), CLIENT_SPAN, 'child of the client\'s span')
  t.equal(parentOf(client), ids(server).span, 'the CLIENT span is the SERVER span\'s child')
  t.match(server.attributes, { 'http.request.method': 'GET', 'url.path': '/things/1', 'url.scheme': 'http', 'http.response.status_code': 200, 'auth_sidecar.route': 'default' })
  t.match(client.attributes, { 'http.request.method': 'GET', 'url.path': '/api/things/1', 'server.address': '127.0.0.1', 'server.port': Number(new URL(h.upstream.url).port), 'http.response.status_code': 200 })
  t.equal(client.attributes['url.full'], `${h.upstream.url}/api/things/1`, 'url.full: scheme, authority and path, not the query')
  const upstream = h.upstream.received.at(-1)!
  t.equal(upstream.headers.traceparent, `00-${CLIENT_TRACE}-${ids(client).span}-01`, 'the upstream\'s parent is the sidecar\'s CLIENT span')
  t.equal(upstream.headers.tracestate, 'app=1', 'the tracestate goes on with the trace')
  const line = h.log.records().find((r) => r.msg === 'request')!
  t.match(line, { trace_id: CLIENT_TRACE, span_id: ids(server).span })
  assertNoSecrets(t, h, ['s3cr3t-query'])
})

t.test('a request its trace does not sample: no span, the trace goes upstream unsampled, a replay with it, the ids in the access line', async (t) => {
  exporter.reset()
  const h = await build(t, {}, {}, { tracing })
  await until(() => h.app.credential.ready())
  h.upstream.rejectTokens.add(h.app.credential.current()!.header)
  // the client's trace is not sampled: the parent-based sampler follows it
  const res = await send(`${h.proxyUrl}/quiet`, { headers: { traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-00`, tracestate: 'app=2' } })
  t.equal(res.status, 200)
  // the access line is written when the SERVER span ends
  await until(() => h.log.records().some((r) => r.msg === 'request' && r.path === '/quiet'))
  const line = h.log.records().find((r) => r.msg === 'request' && r.path === '/quiet')!
  t.equal(line.trace_id, CLIENT_TRACE, 'the access line names the client\'s trace')
  t.match(line.span_id, /^[0-9a-f]{16}$/)
  t.not(line.span_id, CLIENT_SPAN, 'and the sidecar\'s own span in it')
  const tries = h.upstream.received.slice(-2)
  t.equal(tries.length, 2, 'the 401 was replayed')
  for (const received of tries) {
    t.equal(received.headers.traceparent, `00-${CLIENT_TRACE}-${line.span_id}-00`, 'the upstream continues the trace, unsampled, under the sidecar\'s span')
    t.equal(received.headers.tracestate, 'app=2')
  }
  // the renewal the 401 caused is a trace of its own, sampled: the request's are not
  await until(() => spans().some((s) => s.attributes['auth_sidecar.grant_type'] === 'refresh_token'))
  t.same(spans().filter((s) => s.spanContext().traceId === CLIENT_TRACE), [], 'nothing of the request\'s trace is recorded')
})

t.test('a 401 replayed: two CLIENT spans under one SERVER span, the second with http.request.resend_count 1', async (t) => {
  exporter.reset()
  const h = await build(t, {}, {}, { tracing })
  await until(() => h.app.credential.ready())
  const old = h.app.credential.current()!.header
  h.upstream.rejectTokens.add(old)
  const res = await send(`${h.proxyUrl}/data`)
  t.equal(res.status, 200)
  await until(() => spans().some((s) => s.kind === SpanKind.SERVER))
  const server = spans().find((s) => s.kind === SpanKind.SERVER)!
  const tries = spans().filter((s) => s.kind === SpanKind.CLIENT && parentOf(s) === ids(server).span)
  t.equal(tries.length, 2)
  t.equal(tries[0]!.attributes['http.response.status_code'], 401)
  t.equal(tries[0]!.attributes['http.request.resend_count'], undefined)
  t.equal(tries[1]!.attributes['http.request.resend_count'], 1)
  t.equal(tries[1]!.attributes['http.response.status_code'], 200)
  const [first, second] = h.upstream.received.slice(-2)
  t.equal(first!.headers.traceparent, `00-${ids(server).trace}-${ids(tries[0]!).span}-01`)
  t.equal(second!.headers.traceparent, `00-${ids(server).trace}-${ids(tries[1]!).span}-01`)
  // the renewal the 401 caused: a grant of its own, the token line carrying its ids
  const renewal = spans().find((s) => s.kind === SpanKind.INTERNAL && s.attributes['auth_sidecar.grant_type'] === 'refresh_token')
  t.ok(renewal, 'the refresh grant has its span')
  assertNoSecrets(t, h)
})

t.test('a grant: an INTERNAL span, a CLIENT span for the token request whose traceparent the auth server got, the ids in the token line', async (t) => {
  exporter.reset()
  const h = await build(t, {}, {}, { tracing })
  await until(() => h.app.credential.ready())
  const grant = spans().find((s) => s.kind === SpanKind.INTERNAL)!
  t.equal(grant.name, 'grant password')
  t.match(grant.attributes, { 'auth_sidecar.grant_type': 'password', 'auth_sidecar.route': 'default', 'auth_sidecar.outcome': 'success' })
  t.equal(parentOf(grant), undefined, 'a trace of its own')
  const request = spans().find((s) => s.kind === SpanKind.CLIENT && parentOf(s) === ids(grant).span)!
  t.match(request.attributes, { 'http.request.method': 'POST', 'url.path': h.tokenServer.tokenPath, 'http.response.status_code': 200, 'url.scheme': 'http' })
  t.equal(request.attributes['url.full'], `${h.tokenServer.url}${h.tokenServer.tokenPath}`, 'the token request\'s url.full')
  t.equal(h.tokenServer.grants[0]!.traceparent, `00-${ids(grant).trace}-${ids(request).span}-01`, 'the auth server joins the trace')
  const line = h.log.records().find((r) => r.event === 'token' && r.outcome === 'success')!
  t.match(line, { trace_id: ids(grant).trace, span_id: ids(grant).span })
  assertNoSecrets(t, h)
})

t.test('a refused grant: its span says rejected, with the OAuth error code and nothing of the answer\'s text', async (t) => {
  exporter.reset()
  const h = await build(t, {}, {}, { faults: [{ status: 400, body: '{"error":"invalid_grant","error_description":"Invalid user credentials"}' }], tracing })
  await until(() => spans().some((s) => s.kind === SpanKind.INTERNAL))
  const grant = spans().find((s) => s.kind === SpanKind.INTERNAL)!
  t.match(grant.attributes, { 'auth_sidecar.outcome': 'rejected', 'auth_sidecar.oauth_error': 'invalid_grant' })
  const request = spans().find((s) => s.kind === SpanKind.CLIENT && parentOf(s) === ids(grant).span)!
  t.match(request.attributes, { 'http.response.status_code': 400, 'error.type': '400' })
  t.notOk(everything().includes('Invalid user credentials'))
  const line = h.log.records().find((r) => r.event === 'token' && r.outcome === 'rejected')!
  t.match(line, { trace_id: ids(grant).trace, span_id: ids(grant).span })
})

t.test('a request that waited for a token links to the grant it waited for', async (t) => {
  exporter.reset()
  const h = await build(t, {}, {}, { faults: [{ delayMs: 300 }], tracing })
  const res = await send(`${h.proxyUrl}/early`)
  t.equal(res.status, 200)
  await until(() => spans().some((s) => s.kind === SpanKind.SERVER))
  const server = spans().find((s) => s.kind === SpanKind.SERVER)!
  const grant = spans().find((s) => s.kind === SpanKind.INTERNAL)!
  t.same(server.links.map((l) => l.context.spanId), [ids(grant).span])
  t.not(ids(server).trace, ids(grant).trace, 'the grant is its own trace')
})

t.test('a request the sidecar answers itself: error.type is its error code', async (t) => {
  exporter.reset()
  const h = await build(t, { UPSTREAM_TIMEOUT_MS: '100' }, {}, { tracing })
  await until(() => h.app.credential.ready())
  const res = await send(`${h.proxyUrl}/_slow/1000`)
  t.equal(res.status, 504)
  await until(() => spans().some((s) => s.kind === SpanKind.SERVER))
  const server = spans().find((s) => s.kind === SpanKind.SERVER)!
  t.match(server.attributes, { 'http.response.status_code': 504, 'error.type': 'upstream_timeout' })
  const client = spans().find((s) => s.kind === SpanKind.CLIENT && parentOf(s) === ids(server).span)!
  t.ok(client.attributes['error.type'], 'the try that was cut says why')
})

t.test('a client that leaves: its SERVER span ends with the access line\'s 499', async (t) => {
  exporter.reset()
  const h = await build(t, {}, {}, { tracing })
  await until(() => h.app.credential.ready())
  const req = httpRequest(`${h.proxyUrl}/_slow/2000`, { agent: false })
  req.on('error', () => {})
  req.end()
  await until(() => h.upstream.received.length === 1)
  req.destroy()
  await until(() => h.log.records().some((r) => r.msg === 'request' && r.path === '/_slow/2000'))
  const line = h.log.records().find((r) => r.msg === 'request' && r.path === '/_slow/2000')!
  t.equal(line.status, 499)
  await until(() => spans().some((s) => s.kind === SpanKind.SERVER))
  const servers = spans().filter((s) => s.kind === SpanKind.SERVER)
  t.equal(servers.length, 1)
  t.equal(ids(servers[0]!).span, line.span_id, 'the access line\'s span')
  t.equal(servers[0]!.attributes['http.response.status_code'], 499)
})
