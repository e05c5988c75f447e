import t, { type Test } from 'tap'
import { TokenServer } from '../../dev/token-server.js'
import { send, until } from '../helpers/build.js'
import { OtlpReceiver, type OtlpSpan } from '../helpers/otlp-receiver.js'
import { E2E_PASSWORD, spawnSidecar, untilReady, type SpawnedSidecar } from '../helpers/process.js'
import { FakeUpstream } from '../helpers/upstream.js'

// The built sidecar with OTEL_TRACES_EXPORTER=otlp, sending to a receiver
// in this process that stands in for an OpenTelemetry Collector (the real
// receiver, Zipkin, is test/tracing/zipkin.test.ts's).

const CLIENT_TRACE = '5c1a0c6a8e2f4b7d9e3f2a1b0c9d8e7f'
const CLIENT_SPAN = '1f2e3d4c5b6a7980'
const CLIENT_SECRET = 'otlp-client-secret-7a6b'
const QUERY_SECRET = 'query-not-for-spans-4e2d'

/** The span attributes of the stable HTTP semantic conventions the sidecar writes, and nothing else. */
const SERVER_ATTRIBUTES = ['auth_sidecar.route', 'http.request.method', 'http.response.status_code', 'network.peer.address', 'server.port', 'url.path', 'url.scheme']
const CLIENT_ATTRIBUTES = ['http.request.method', 'http.response.status_code', 'server.address', 'server.port', 'url.full', 'url.path', 'url.scheme']
/** Names of the older, experimental conventions, and the query's: none may appear. */
const OLD_NAMES = ['http.method', 'http.url', 'http.target', 'http.status_code', 'http.scheme', 'net.peer.name', 'net.peer.port', 'net.host.port', 'url.query']

interface Stand {
  receiver: OtlpReceiver
  tokenServer: TokenServer
  upstream: FakeUpstream
  sidecar: SpawnedSidecar
}

/**
 * The receiver, a token server whose first answer comes `tokenDelayMs`
 * late, an upstream, and the built sidecar (confidential client
 * legacy-app, password grant) exporting to the receiver with `env`.
 */
async function stand (t: Test, env: Record<string, string>, tokenDelayMs = 0): Promise<Stand> {
  const receiver = new OtlpReceiver()
  await receiver.listen()
  const tokenServer = new TokenServer({ users: { 'service-user': E2E_PASSWORD }, clients: { 'legacy-app': CLIENT_SECRET } })
  if (tokenDelayMs > 0) tokenServer.faults.push({ delayMs: tokenDelayMs })
  await tokenServer.listen()
  const upstream = new FakeUpstream(tokenServer)
  await upstream.listen()
  t.teardown(async () => {
    await upstream.close()
    await tokenServer.close()
    await receiver.close()
  })
  const sidecar = await spawnSidecar(t, `${upstream.url}/api`, tokenServer.url, E2E_PASSWORD, {
    AUTH_CLIENT_SECRET: CLIENT_SECRET,
    OTEL_TRACES_EXPORTER: 'otlp',
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.url}/v1/traces`,
    OTEL_BSP_SCHEDULE_DELAY: '200',
    ...env
  })
  return { receiver, tokenServer, upstream, sidecar }
}

t.test('OTLP/JSON: a request that waited for the grant links to the grant\'s span; stable attribute names; no secret in the export', { timeout: 60_000 }, async (t) => {
  // the first token answer comes 4 s late, and a request may wait 20 s for it: wide margins on a busy machine
  const { receiver, tokenServer, upstream, sidecar } = await stand(t, { OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', TOKEN_WAIT_MS: '20000' }, 4_000)

  // the first token request has reached the token server, which holds its answer back
  await until(() => tokenServer.maxConcurrent > 0, 10_000)
  t.equal(tokenServer.grants.length, 0, 'no token yet when the request is sent')
  const res = await send(`${sidecar.proxyUrl}/orders/7?api_key=${QUERY_SECRET}`, { headers: { traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01` } })
  t.equal(res.status, 200, 'answered once the grant ended')

  const complete = (s: OtlpSpan[]): boolean => ['SERVER', 'CLIENT', 'INTERNAL'].every((kind) => s.some((x) => x.kind === kind)) && s.filter((x) => x.kind === 'CLIENT').length >= 2
  await until(() => complete(receiver.spans()), 10_000).catch(() => {})
  const spans = receiver.spans()
  t.ok(receiver.posts.length > 0 && receiver.posts.every((p) => p.path === '/v1/traces' && p.contentType.startsWith('application/json')), 'OTLP/JSON POSTs to the endpoint given')

  const grant = spans.find((s) => s.kind === 'INTERNAL' && s.name === 'grant password')
  const tokenRequest = spans.find((s) => s.kind === 'CLIENT' && s.parentSpanId === grant?.spanId)
  const server = spans.find((s) => s.kind === 'SERVER' && s.traceId === CLIENT_TRACE)
  const client = spans.find((s) => s.kind === 'CLIENT' && s.parentSpanId === server?.spanId)
  if (grant === undefined || tokenRequest === undefined || server === undefined || client === undefined) {
    t.fail(`spans missing from the export: ${JSON.stringify(spans.map((s) => [s.kind, s.name]))}`)
    return
  }

  t.equal(server.parentSpanId, CLIENT_SPAN, 'the SERVER span is a child of the application\'s span')
  t.same(server.links, [{ traceId: grant.traceId, spanId: grant.spanId }], 'the SERVER span links to the grant it waited for, by the grant span\'s own ids')
  t.not(server.traceId, grant.traceId, 'the grant is a trace of its own')
  t.equal(client.traceId, CLIENT_TRACE, 'the CLIENT span is in the application\'s trace')
  t.equal(upstream.received.at(-1)!.headers.traceparent, `00-${CLIENT_TRACE}-${client.spanId}-01`, 'the upstream got the CLIENT span as its parent')
  t.equal(tokenServer.grants[0]!.traceparent, `00-${grant.traceId}-${tokenRequest.spanId}-01`, 'the token server got the token request\'s span as its parent')

  t.same(Object.keys(server.attributes).sort(), SERVER_ATTRIBUTES, 'SERVER: the stable HTTP attribute names and the route')
  t.match(server.attributes, { 'http.request.method': 'GET', 'url.path': '/orders/7', 'url.scheme': 'http', 'http.response.status_code': 200, 'auth_sidecar.route': 'default' }, 'SERVER: what the request was')
  t.same(Object.keys(client.attributes).sort(), CLIENT_ATTRIBUTES, 'CLIENT: the stable HTTP attribute names')
  t.match(client.attributes, { 'http.request.method': 'GET', 'url.path': '/api/orders/7', 'server.address': '127.0.0.1', 'server.port': Number(new URL(upstream.url).port), 'http.response.status_code': 200 }, 'CLIENT: what went upstream')
  t.match(grant.attributes, { 'auth_sidecar.grant_type': 'password', 'auth_sidecar.route': 'default', 'auth_sidecar.outcome': 'success' }, 'INTERNAL: the grant and its outcome')
  t.equal(client.attributes['url.full'], `${upstream.url}/api/orders/7`, 'CLIENT: url.full, scheme, authority and path, without the query')
  t.match(tokenRequest.attributes, { 'http.request.method': 'POST', 'url.path': tokenServer.tokenPath, 'http.response.status_code': 200 }, 'the token request: a CLIENT span under the grant')
  t.equal(tokenRequest.attributes['url.full'], `${tokenServer.url}${tokenServer.tokenPath}`, 'the token request\'s url.full')
  t.equal(server.resource['service.name'], 'auth-sidecar', 'the resource: the service\'s name')
  for (const s of spans) {
    const old = OLD_NAMES.filter((name) => name in s.attributes)
    t.same(old, [], `${s.kind} ${s.name}: no name of the older conventions, no query`)
    t.equal('url.full' in s.attributes, s.kind === 'CLIENT', `${s.kind} ${s.name}: url.full on CLIENT spans only`)
    if (s.kind === 'CLIENT') t.notMatch(String(s.attributes['url.full']), /[?#]/, `${s.name}: url.full without a query`)
  }

  const text = receiver.jsonText()
  const accessToken = upstream.received.at(-1)!.headers.authorization?.split(' ')[1] ?? ''
  t.ok(accessToken.length > 20, 'the upstream got a token')
  for (const [what, secret] of [['the access token', accessToken], ['the password', E2E_PASSWORD], ['the client secret', CLIENT_SECRET], ['the query string', QUERY_SECRET]]) {
    t.notOk(text.includes(secret!), `not in the export: ${what}`)
  }
  t.notMatch(text, /eyJ|Bearer|refresh_token|api_key/, 'no JWT, no Authorization value, no token field, no query parameter name')

  const line = sidecar.run.stdout.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.event === 'token' && l.outcome === 'success')
  t.match(line, { trace_id: grant.traceId, span_id: grant.spanId }, 'the token log line names the grant span')
})

t.test('OTLP with the default protocol: http/protobuf bodies reach the receiver, the request\'s trace id among their bytes', { timeout: 60_000 }, async (t) => {
  const { receiver, sidecar } = await stand(t, {})
  await untilReady(sidecar)
  const res = await send(`${sidecar.proxyUrl}/orders`, { headers: { traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01` } })
  t.equal(res.status, 200)
  // the bytes are not decoded here: the JSON test reads the same spans
  const traceBytes = Buffer.from(CLIENT_TRACE, 'hex')
  await until(() => receiver.posts.some((p) => p.body.includes(traceBytes)), 10_000).catch(() => {})
  t.ok(receiver.posts.length > 0, 'exports arrived')
  for (const post of receiver.posts) {
    t.equal(post.path, '/v1/traces', 'to the endpoint given')
    t.equal(post.contentType, 'application/x-protobuf', 'protobuf, the default protocol')
    t.ok(post.body.length > 0, 'a non-empty body')
  }
  t.ok(receiver.posts.some((p) => p.body.includes(traceBytes)), 'the request\'s trace id (16 bytes) is in an export')
  t.ok(receiver.posts.some((p) => p.body.includes(Buffer.from('auth-sidecar'))), 'so is the service name')
})

t.test('spans still held when the sidecar is stopped are exported before it exits', { timeout: 60_000 }, async (t) => {
  // nothing would be sent on schedule for a minute: only the shutdown sends
  const { receiver, sidecar } = await stand(t, { OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '60000' })
  await untilReady(sidecar)
  const res = await send(`${sidecar.proxyUrl}/orders/9`, { headers: { traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01` } })
  t.equal(res.status, 200)
  t.equal(receiver.posts.length, 0, 'nothing exported yet')
  sidecar.run.child.kill('SIGTERM')
  t.equal(await sidecar.run.exited, 0, 'the sidecar stopped cleanly')
  const server = receiver.spans().find((s) => s.kind === 'SERVER' && s.traceId === CLIENT_TRACE)
  t.equal(server?.attributes['url.path'], '/orders/9', 'the request\'s SERVER span reached the receiver')
  t.ok(receiver.spans().some((s) => s.kind === 'CLIENT' && s.parentSpanId === server?.spanId), 'and its CLIENT span')
})
