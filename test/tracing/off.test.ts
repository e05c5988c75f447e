import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { tracingLoaded } from '../../src/tracing/tracing.js'
import { build, send, until } from '../helpers/build.js'

// This file never imports the SDK itself: what it loads, the sidecar loaded.

t.test('off by default: the SDK is not loaded, the client\'s traceparent goes upstream untouched, log lines carry no ids', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'
  const res = await send(`${h.proxyUrl}/x`, { headers: { traceparent } })
  t.equal(res.status, 200)
  t.equal(h.upstream.received.at(-1)!.headers.traceparent, traceparent)
  t.equal(tracingLoaded(), false, 'the tracing module was never imported')
  for (const line of h.log.records()) t.notOk('trace_id' in line || 'span_id' in line, String(line.msg))
})

t.test('OTEL_TRACES_EXPORTER turns it on; unset, empty or none is off; the service is auth-sidecar unless named', async (t) => {
  const base = { BASE_URL: 'http://127.0.0.1:1/api', AUTH_URL: 'http://127.0.0.1:2', AUTH_CLIENT_ID: 'c', AUTH_USERNAME: 'u', AUTH_PASSWORD: 'p' }
  const of = (env: Record<string, string>) => loadConfig({ ...base, ...env }, { cwd: '/nonexistent' }).tracing
  t.equal(of({}), undefined)
  t.equal(of({ OTEL_TRACES_EXPORTER: '' }), undefined)
  t.equal(of({ OTEL_TRACES_EXPORTER: 'none' }), undefined)
  t.same(of({ OTEL_TRACES_EXPORTER: 'zipkin' }), { exporter: 'zipkin', serviceName: 'auth-sidecar' })
  t.same(of({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_SERVICE_NAME: 'orders-sidecar' }), { exporter: 'otlp', serviceName: undefined })
  t.same(of({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_RESOURCE_ATTRIBUTES: 'team=a,service.name=x' }), { exporter: 'otlp', serviceName: undefined })
})
