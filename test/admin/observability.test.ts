import { createServer } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import { build, send, until } from '../helpers/build.js'
import { TestCa } from '../helpers/certificates.js'

t.test('ACCESS_LOG=false: no line per request, token events still logged', async (t) => {
  const h = await build(t, { ACCESS_LOG: 'false' })
  await until(() => h.app.credential.ready())
  for (let i = 0; i < 3; i++) t.equal((await send(`${h.proxyUrl}/x`)).status, 200)
  const records = h.log.records()
  t.equal(records.filter((r) => r.msg === 'request').length, 0)
  t.ok(records.some((r) => r.msg === 'token obtained'))
  t.match((await send(`${h.adminUrl}/metrics`)).body, /auth_sidecar_proxy_request_duration_seconds_count\{status="200",route="default"\} 3/, 'metrics still count them')
})

t.test('metrics: conventional process names, every series of the sidecar\'s counters at 0 from the first scrape, build info', async (t) => {
  // the first grant hangs: nothing has happened yet when the first scrape comes
  const h = await build(t, {}, {}, { faults: [{ hang: true }] })
  await until(() => h.tokenServer.grants.length === 1)
  const body = (await send(`${h.adminUrl}/metrics`)).body
  t.match(body, /^process_cpu_seconds_total /m)
  t.match(body, /^process_resident_memory_bytes /m)
  t.match(body, /^nodejs_heap_size_used_bytes /m)
  t.notMatch(body, /auth_sidecar_process_|auth_sidecar_nodejs_/)
  const series = (name: string): string[] => body.split('\n').filter((l) => l.startsWith(`${name}{`))
  const grants = series('auth_sidecar_token_grants_total')
  t.equal(grants.length, 12, 'four grant types times three outcomes')
  for (const grant of ['password', 'client_credentials', 'refresh_token', 'token_exchange']) {
    for (const outcome of ['success', 'rejected', 'error']) t.ok(grants.includes(`auth_sidecar_token_grants_total{grant_type="${grant}",outcome="${outcome}",route="default"} 0`), `${grant} ${outcome} at 0`)
  }
  t.same(series('auth_sidecar_upstream_errors_total').sort(), ['unreachable', 'timeout', 'reset'].map((r) => `auth_sidecar_upstream_errors_total{reason="${r}",route="default"} 0`).sort())
  t.same(series('auth_sidecar_logouts_total').sort(), ['success', 'rejected', 'error', 'skipped'].map((o) => `auth_sidecar_logouts_total{outcome="${o}",route="default"} 0`).sort())
  t.match(body, /^auth_sidecar_ready 0$/m)
  t.match(body, /^auth_sidecar_build_info\{version="\d+\.\d+\.\d+[^"]*"\} 1$/m)
})

t.test('the sidecar\'s own 502 and 504 are counted by reason, apart from the upstream\'s', async (t) => {
  const closed = await new Promise<number>((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => { const p = (s.address() as { port: number }).port; s.close(() => resolve(p)) })
  })
  const h = await build(t, { UPSTREAM_TIMEOUT_MS: '200' })
  await until(() => h.app.credential.ready())
  t.equal((await send(`${h.proxyUrl}/_slow/1000`)).status, 504)
  t.equal((await send(`${h.proxyUrl}/_reset`, { method: 'POST', body: 'x' })).status, 502)
  t.equal((await send(`${h.proxyUrl}/_status/502`)).status, 502, 'the upstream\'s own 502 is relayed, not counted')
  const body = (await send(`${h.adminUrl}/metrics`)).body
  t.match(body, 'auth_sidecar_upstream_errors_total{reason="timeout",route="default"} 1')
  t.match(body, 'auth_sidecar_upstream_errors_total{reason="reset",route="default"} 1')
  t.match(body, 'auth_sidecar_upstream_errors_total{reason="unreachable",route="default"} 0')
  const down = await build(t, { BASE_URL: `http://127.0.0.1:${closed}` })
  await until(() => down.app.credential.ready())
  t.equal((await send(`${down.proxyUrl}/x`)).status, 502)
  t.match((await send(`${down.adminUrl}/metrics`)).body, 'auth_sidecar_upstream_errors_total{reason="unreachable",route="default"} 1')
})

t.test('readyz names the reason it knows: token endpoint unreachable', async (t) => {
  const closed = await new Promise<number>((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => { const p = (s.address() as { port: number }).port; s.close(() => resolve(p)) })
  })
  const h = await build(t, { AUTH_URL: undefined as unknown as string, AUTH_TOKEN_URL: `http://127.0.0.1:${closed}/token` })
  await until(() => h.log.records().some((r) => r.outcome === 'error'))
  const ready = await send(`${h.adminUrl}/readyz`)
  t.equal(ready.status, 503)
  t.same(JSON.parse(ready.body), { status: 'not_ready', reason: 'token endpoint unreachable or failing; retrying' })
})

t.test('LOG_LEVEL=debug: each token request and answer status, retry decisions, upstream connections', async (t) => {
  const h = await build(t, { LOG_LEVEL: 'debug' }, { users: { 'service-user': 'not-yet' } })
  // the refusal is answered, then logged: wait for its last line
  await until(() => h.log.records().some((r) => r.msg === 'token request will be retried'))
  h.tokenServer.users['service-user'] = 'service-password-9f8e7d'
  const debug = h.log.records().filter((r) => r.level === 20)
  t.ok(debug.some((r) => r.msg === 'token request' && r.grant === 'password' && typeof r.tokenUrl === 'string'))
  t.ok(debug.some((r) => r.msg === 'token endpoint answered' && r.status === 400))
  t.ok(debug.some((r) => r.msg === 'token request will be retried' && typeof r.retryInMs === 'number'))
  const ok = await build(t, { LOG_LEVEL: 'debug' })
  await until(() => ok.app.credential.ready())
  await send(`${ok.proxyUrl}/x`)
  await until(() => ok.log.records().some((r) => r.msg === 'upstream connection opened'))
  t.notMatch(h.log.lines.join('\n') + ok.log.lines.join('\n'), /service-password-9f8e7d|not-yet/, 'no secret in debug lines')
})

t.test('the chart\'s alerts and the Grafana dashboard use only metrics the sidecar serves', async (t) => {
  const { readFileSync } = await import('node:fs')
  const root = new URL('../../', import.meta.url)
  // with a client certificate, so that its expiry is served too
  const client = TestCa.create(join(t.testdir({}), 'ca')).issue('client', { cn: 'sidecar' })
  const h = await build(t, { UPSTREAM_TLS_CERT_FILE: client.certFile, UPSTREAM_TLS_KEY_FILE: client.keyFile })
  await until(() => h.app.credential.ready())
  await send(`${h.proxyUrl}/x`)
  const served = new Set([...(await send(`${h.adminUrl}/metrics`)).body.matchAll(/^([a-z_]+)[{ ]/gm)].map((m) => m[1]))
  const rule = readFileSync(new URL('helm/auth-sidecar/templates/prometheusrule.yaml', root), 'utf8')
  const dashboard = JSON.parse(readFileSync(new URL('deploy/grafana/auth-sidecar.json', root), 'utf8')) as { panels: Array<{ targets: Array<{ expr: string }> }> }
  const used = [rule, ...dashboard.panels.flatMap((p) => p.targets.map((x) => x.expr))].join('\n')
  const names = new Set([...used.matchAll(/\b((?:auth_sidecar|process|nodejs)_[a-z_]+)\b/g)].map((m) => m[1]))
  t.ok(names.size >= 8, `${names.size} metric names used`)
  for (const name of names) t.ok(served.has(name), `${name} is served`)
  // and only labels it serves, besides those Prometheus adds itself
  const metrics = (await send(`${h.adminUrl}/metrics`)).body
  const servedLabels = new Set([...metrics.matchAll(/[{,]([a-z_]+)="/g)].map((m) => m[1]))
  const labels = new Set([
    ...[...used.matchAll(/by \(([a-z_, ]+)\)/g)].flatMap((m) => m[1]!.split(',').map((l) => l.trim())),
    ...[...used.matchAll(/\$labels\.([a-z_]+)/g)].map((m) => m[1]!)
  ])
  t.ok(labels.has('route'), 'the alerts say which route')
  for (const label of labels) if (!['pod', 'job', 'instance'].includes(label)) t.ok(servedLabels.has(label), `label ${label} is served`)
})
