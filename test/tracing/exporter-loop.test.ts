import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { ConfigError } from '../../src/errors.js'
import { until } from '../helpers/build.js'
import { start } from '../helpers/process.js'

// An exporter pointed at the sidecar's own proxy would have its exports
// proxied upstream with a route's token, and traced, and exported again.

const BASE = { BASE_URL: 'http://api.example:8000/api', AUTH_URL: 'http://127.0.0.1:2', AUTH_CLIENT_ID: 'c', AUTH_USERNAME: 'u', AUTH_PASSWORD: 'p', PROXY_PORT: '4318' }

/** The configuration's problems (none: []) with `env` over BASE. */
function problems (env: Record<string, string>): string[] {
  try {
    loadConfig({ ...BASE, ...env }, { cwd: '/nonexistent' })
    return []
  } catch (err) {
    if (err instanceof ConfigError) return [...err.problems]
    throw err
  }
}

t.test('an OTLP or Zipkin endpoint on the sidecar\'s own proxy port is refused, naming the variable and the port', async (t) => {
  const otlp = { OTEL_TRACES_EXPORTER: 'otlp' }
  t.match(problems({ ...otlp, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }), [/^OTEL_EXPORTER_OTLP_ENDPOINT points at the sidecar's own PROXY_PORT \(4318\)/])
  t.match(problems({ ...otlp, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://localhost:4318/v1/traces' }), [/^OTEL_EXPORTER_OTLP_TRACES_ENDPOINT points at the sidecar's own PROXY_PORT \(4318\)/])
  t.match(problems({ ...otlp }), [/^OTEL_EXPORTER_OTLP_ENDPOINT is unset, and the exporter's default, http:\/\/localhost:4318, is the sidecar's own PROXY_PORT \(4318\)/], 'the SDK\'s default endpoint too')
  t.match(problems({ OTEL_TRACES_EXPORTER: 'zipkin', OTEL_EXPORTER_ZIPKIN_ENDPOINT: 'http://[::1]:4318/api/v2/spans' }), [/^OTEL_EXPORTER_ZIPKIN_ENDPOINT points at the sidecar's own PROXY_PORT \(4318\)/])
  t.match(problems({ OTEL_TRACES_EXPORTER: 'zipkin', PROXY_PORT: '9411' }), [/^OTEL_EXPORTER_ZIPKIN_ENDPOINT is unset.*PROXY_PORT \(9411\)/], 'Zipkin\'s default endpoint')
  t.match(problems({ ...otlp, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc', PROXY_PORT: '4317' }), [/^OTEL_EXPORTER_OTLP_ENDPOINT is unset, and the exporter's default, http:\/\/localhost:4317, is the sidecar's own PROXY_PORT \(4317\)/], 'gRPC\'s default endpoint')
  t.match(problems({ ...otlp, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc', OTEL_EXPORTER_OTLP_ENDPOINT: '127.0.0.1:4318' }), [/^OTEL_EXPORTER_OTLP_ENDPOINT points at the sidecar's own PROXY_PORT/], 'gRPC\'s host:port form')

  // every loopback spelling, the unspecified addresses, PROXY_HOST's own
  for (const host of ['127.0.0.1', '127.8.9.10', 'localhost', 'LOCALHOST.', 'collector.localhost', '[::1]', '0.0.0.0', '[::]', '[::ffff:127.0.0.1]', '2130706433']) {
    t.match(problems({ ...otlp, OTEL_EXPORTER_OTLP_ENDPOINT: `http://${host}:4318` }), [/PROXY_PORT \(4318\)/], host)
  }
  t.match(problems({ ...otlp, PROXY_HOST: '10.1.2.3', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://10.1.2.3:4318' }), [/PROXY_PORT \(4318\)/], 'PROXY_HOST\'s address')

  // a route's own port, the forward proxy's port
  t.match(problems({ ...otlp, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:8081', ROUTE_BILLING_BASE_URL: 'http://billing.example', ROUTE_BILLING_PORT: '8081' }), [/^OTEL_EXPORTER_OTLP_ENDPOINT points at the sidecar's own ROUTE_BILLING_PORT \(8081\)/])
  t.match(problems({ ...otlp, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:3128', FORWARD_PROXY_PORT: '3128' }), [/^OTEL_EXPORTER_OTLP_ENDPOINT points at the sidecar's own FORWARD_PROXY_PORT \(3128\)/])
  t.match(problems({ ...otlp, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://localhost', PROXY_PORT: '80' }), [/PROXY_PORT \(80\)/], 'the scheme\'s default port')
})

t.test('an exporter sent through an egress proxy that is the sidecar\'s own forward proxy is refused, unless NO_PROXY names the collector', async (t) => {
  const env = { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: 'https://collector.example:4318', FORWARD_PROXY_PORT: '3128' }
  t.match(problems({ ...env, HTTPS_PROXY: 'http://127.0.0.1:3128' }), [/^OTEL_EXPORTER_OTLP_ENDPOINT: the exporter would send through HTTPS_PROXY, the sidecar's own FORWARD_PROXY_PORT \(3128\)/])
  t.match(problems({ ...env, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector.example:4318', http_proxy: 'http://localhost:3128' }), [/through http_proxy, the sidecar's own FORWARD_PROXY_PORT \(3128\)/])
  t.match(problems({ ...env, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc', grpc_proxy: 'http://127.0.0.1:3128' }), [/through grpc_proxy, the sidecar's own FORWARD_PROXY_PORT/], 'gRPC\'s own variable')
  t.match(problems({ OTEL_TRACES_EXPORTER: 'zipkin', OTEL_EXPORTER_ZIPKIN_ENDPOINT: 'http://zipkin.example:9411/api/v2/spans', FORWARD_PROXY_PORT: '3128', HTTP_PROXY: 'http://127.0.0.1:3128' }), [/^OTEL_EXPORTER_ZIPKIN_ENDPOINT: the exporter would send through HTTP_PROXY/])
  t.same(problems({ ...env, HTTPS_PROXY: 'http://127.0.0.1:3128', NO_PROXY: 'localhost,.example' }), [], 'NO_PROXY names the collector\'s domain')
  t.same(problems({ ...env, HTTPS_PROXY: 'http://127.0.0.1:3128', NO_PROXY: 'collector.example:4318' }), [], 'NO_PROXY names the collector and its port')
  t.same(problems({ ...env, HTTPS_PROXY: 'http://proxy.corp:3128' }), [], 'a corporate proxy elsewhere')
  t.same(problems({ ...env, HTTP_PROXY: 'http://127.0.0.1:3128' }), [], 'HTTP_PROXY is not an https endpoint\'s proxy')
})

t.test('controls: a collector elsewhere, on another port, or tracing off, starts', async (t) => {
  t.same(problems({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4319' }), [], 'another port on loopback')
  t.same(problems({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector.observability:4318' }), [], 'another host on the proxy\'s port')
  t.same(problems({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://127.0.0.1:4319/v1/traces' }), [], 'the traces endpoint is the one the SDK uses')
  t.same(problems({ OTEL_TRACES_EXPORTER: 'zipkin', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }), [], 'an OTLP endpoint no exporter uses')
  t.same(problems({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }), [], 'tracing off')
  t.same(problems({ OTEL_TRACES_EXPORTER: 'otlp', PROXY_PORT: '0' }), [], 'a port of the kernel\'s choice')
})

t.test('the built sidecar with its OTLP endpoint on its proxy port: exit 1 and one readable line, before listening', async (t) => {
  const run = start({ ...BASE, PROXY_PORT: '18318', ADMIN_PORT: '0', OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:18318' })
  t.teardown(() => { run.child.kill('SIGKILL') })
  let exited = false
  void run.exited.then(() => { exited = true })
  // watches until the process exits: its exit decides the race, and nothing is left polling after it
  const listening = until(() => exited || run.stdout.some((l) => l.includes('auth-sidecar listening')), 20_000).then(() => (exited ? 'exited' : 'listening'), () => 'silent')
  t.equal(await Promise.race([run.exited, listening]), 1, 'exit 1, rather than listening')
  const stderr = run.stderr.join('')
  t.match(stderr, /^auth-sidecar: invalid configuration: OTEL_EXPORTER_OTLP_ENDPOINT points at the sidecar's own PROXY_PORT \(18318\)[^\n]*\n$/, 'one line naming the variable and the port')
  t.notOk(run.stdout.some((l) => l.includes('listening')), 'never listened')
})
