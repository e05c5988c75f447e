import { readFileSync } from 'node:fs'
import { send, until } from '../helpers/build.js'
import { keycloakTest } from '../helpers/keycloak.js'
import { OtlpReceiver } from '../helpers/otlp-receiver.js'
import { spawnSidecar, untilReady } from '../helpers/process.js'
import { resourceServer } from '../helpers/resource-server.js'

const PASSWORD = 'service-user-password-5e1f'
const CLIENT_SECRET = 'legacy-app-secret-8f2d'
const SERVICE_SECRET = 'service-app-secret-3c7a'

// The run's `hostname` Keycloak has tracing on (scripts/keycloak.mjs): each
// of its log lines carries the trace id of the request it served, and its
// event listener logs every grant. The sidecar's token request carries the
// traceparent of its grant's span, so Keycloak's line for that grant names
// the sidecar's trace.

/** Each grant, and the event Keycloak's jboss-logging listener writes for it. */
const GRANTS = {
  password: { settings: { AUTH_CLIENT_SECRET: CLIENT_SECRET }, event: 'LOGIN', client: 'legacy-app' },
  client_credentials: { settings: { AUTH_GRANT_TYPE: 'client_credentials', AUTH_CLIENT_ID: 'service-app', AUTH_CLIENT_SECRET: SERVICE_SECRET, AUTH_USERNAME: '', AUTH_PASSWORD: '' }, event: 'CLIENT_LOGIN', client: 'service-app' }
}

for (const [grant, { settings, event, client }] of Object.entries(GRANTS)) {
  keycloakTest(`the real Keycloak, tracing on, logs the sidecar's trace id on its ${grant} token request`, async (t, kc) => {
    const keycloak = kc.hostname
    if (keycloak.log === undefined) {
      t.fail('the run\'s state names no log file for the hostname server: scripts/keycloak.mjs serve writes it')
      return
    }
    const realm = await keycloak.realm(t)
    const api = await resourceServer(t, realm.issuer, realm.jwksUrl)
    const receiver = new OtlpReceiver()
    await receiver.listen()
    t.teardown(async () => await receiver.close())
    const sidecar = await spawnSidecar(t, api.url, '', PASSWORD, {
      AUTH_TOKEN_URL: realm.tokenUrl,
      ...settings,
      OTEL_TRACES_EXPORTER: 'otlp',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.url}/v1/traces`,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '200'
    })
    await untilReady(sidecar, 15_000)
    t.equal((await send(`${sidecar.proxyUrl}/orders`)).status, 200, 'the API took Keycloak\'s token')

    const tokenLine = sidecar.run.stdout.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.event === 'token' && l.outcome === 'success')
    const traceId = tokenLine?.trace_id
    if (typeof traceId !== 'string') {
      t.fail(`no trace_id on the token line: ${JSON.stringify(tokenLine)}`)
      return
    }

    // the sidecar's side: the grant span the line names, and its token request under it, to Keycloak
    await until(() => receiver.spans().some((s) => s.kind === 'CLIENT' && s.parentSpanId === tokenLine!.span_id), 10_000).catch(() => {})
    const spans = receiver.spans()
    const grantSpan = spans.find((s) => s.spanId === tokenLine!.span_id)
    const tokenRequest = spans.find((s) => s.kind === 'CLIENT' && s.parentSpanId === tokenLine!.span_id)
    t.match(grantSpan, { traceId, kind: 'INTERNAL', name: `grant ${grant}` }, 'the token line names the grant\'s span')
    t.match(tokenRequest, { traceId, attributes: { 'url.path': new URL(realm.tokenUrl).pathname, 'http.response.status_code': 200 } }, 'its token request to Keycloak is its child')

    // Keycloak's side: the event of that grant, logged within the same trace
    const logged = (): string[] => readFileSync(keycloak.log!, 'utf8').split('\n').filter((l) => l.includes(`traceId=${traceId}`))
    await until(() => logged().length > 0, 10_000).catch(() => {})
    const lines = logged()
    t.ok(lines.length > 0, `Keycloak logged a line with traceId=${traceId}`)
    const line = lines.find((l) => l.includes(`type="${event}"`))
    t.ok(line, `it is the ${event} event of the grant`)
    t.match(line, `realmName="${realm.name}"`, 'in the test\'s realm')
    t.match(line, `clientId="${client}"`, 'for the sidecar\'s client')
    t.match(line, `grant_type="${grant}"`, `a ${grant} grant`)
    t.notMatch(lines.join('\n'), new RegExp(`${PASSWORD}|${CLIENT_SECRET}|${SERVICE_SECRET}`), 'no secret in those lines')
  })
}
