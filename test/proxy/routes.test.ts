import { generateKeyPairSync } from 'node:crypto'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { build, CLIENT_SECRET, metric, rawRequest, send, statusOf, until, type Harness } from '../helpers/build.js'
import { FakeUpstream } from '../helpers/upstream.js'
import type { TokenServerOptions } from '../../dev/token-server.js'

/** More upstreams, checking tokens with the harness's token server. */
async function upstreams (t: Test, h: Harness | undefined, n: number, tokens = h?.tokenServer): Promise<FakeUpstream[]> {
  return await Promise.all(Array.from({ length: n }, async () => {
    const up = new FakeUpstream(tokens)
    await up.listen()
    t.teardown(async () => await up.close())
    return up
  }))
}

/** Who a forwarded request's token names: its client (azp) and audience. */
function identity (h: Harness, up: FakeUpstream): { client: string, audience: string } | string {
  const verdict = h.tokenServer.verify(up.received.at(-1)?.headers.authorization)
  return verdict.ok ? { client: verdict.client, audience: verdict.audience } : verdict.reason
}

/** A sidecar whose route `reports` (/reports) holds the default credential's token exchanged for reports-api, once ready. */
async function withReportsExchange (t: Test, env: Record<string, string> = {}, tokenOptions: TokenServerOptions = {}): Promise<{ h: Harness, reports: FakeUpstream, route: Harness['app']['routes'][number] }> {
  const [reports] = await upstreams(t, undefined, 1)
  const h = await build(t, {
    ROUTE_REPORTS_BASE_URL: reports!.url,
    ROUTE_REPORTS_PATH: '/reports',
    ROUTE_REPORTS_AUTH_EXCHANGE_AUDIENCE: 'reports-api',
    ...env
  }, { exchange: { 'legacy-app': ['reports-api'] }, ...tokenOptions })
  await until(() => h.app.routes.every((r) => r.credential.ready()))
  return { h, reports: reports!, route: h.app.routes.find((r) => r.config.name === 'reports')! }
}

t.test('a path route: its prefix removed, whole segments only, the longest prefix first; the default route keeps every other path', async (t) => {
  const [billing, v2] = await upstreams(t, undefined, 2)
  const h = await build(t, {
    ROUTE_BILLING_BASE_URL: `${billing!.url}/bill`,
    ROUTE_BILLING_PATH: '/billing/',
    ROUTE_BILLING_V2_BASE_URL: v2!.url,
    ROUTE_BILLING_V2_PATH: '/billing/v2'
  })
  await until(() => h.app.credential.ready())
  const cases: Array<[string, FakeUpstream, string]> = [
    ['/billing/invoices?x=1', billing!, '/bill/invoices?x=1'],
    ['/billing', billing!, '/bill/'],
    ['/billing/', billing!, '/bill/'],
    ['/billing?q=1', billing!, '/bill/?q=1'],
    ['/billing/v2/x', v2!, '/x'],
    ['/billing/v2', v2!, '/'],
    ['/billingx', h.upstream, '/api/billingx'],
    ['/Billing/x', h.upstream, '/api/Billing/x'],
    ['/other', h.upstream, '/api/other']
  ]
  for (const [path, up, forwarded] of cases) {
    const before = up.received.length
    t.equal((await send(h.proxyUrl + path)).status, 200, path)
    t.equal(up.received.length, before + 1, `${path}: to its route's upstream`)
    t.equal(up.received.at(-1)!.url, forwarded, path)
  }
  const lines = h.log.records().filter((r) => r.msg === 'request')
  t.same(lines.map((l) => l.route), ['billing', 'billing', 'billing', 'billing', 'billing_v2', 'billing_v2', 'default', 'default', 'default'], 'the access line names the route')
})

t.test('a path route matched through percent-encoding: the decoded prefix is removed whole, requests and WebSocket handshakes alike', async (t) => {
  const [api, v2] = await upstreams(t, undefined, 2)
  const h = await build(t, {
    ROUTE_API_BASE_URL: `${api!.url}/base`,
    ROUTE_API_PATH: '/api',
    ROUTE_V2_BASE_URL: `${v2!.url}/two`,
    ROUTE_V2_PATH: '/api/v2'
  })
  await until(() => h.app.credential.ready())
  const cases: Array<[string, FakeUpstream, string]> = [
    ['/%61pi/x', api!, '/base/x'],
    ['/%61%70%69/x?q=%61', api!, '/base/x?q=%61'],
    ['/%61pi', api!, '/base/'],
    ['/api/v%32/y', v2!, '/two/y'],
    ['/%61pi/%76%32/y/%7A', v2!, '/two/y/%7A'],
    ['/api/v2%2Fy', api!, '/base/v2%2Fy']
  ]
  for (const [target, up, forwarded] of cases) {
    const before = up.received.length
    t.equal(statusOf(await rawRequest(h.proxyPort, `GET ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)), 200, target)
    t.equal(up.received.length, before + 1, `${target}: to its route's upstream`)
    t.equal(up.received.at(-1)?.url, forwarded, `${target}: forwarded as ${forwarded}`)
  }
  const { WebSocketServer } = await import('ws')
  const { createServer } = await import('node:http')
  const paths: string[] = []
  const server = createServer()
  const wss = new WebSocketServer({ server })
  wss.on('connection', (ws, req) => { paths.push(req.url ?? ''); ws.close() })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { wss.close(); server.closeAllConnections(); server.close() })
  const wsRoute = await build(t, { ROUTE_WS_BASE_URL: `http://127.0.0.1:${(server.address() as { port: number }).port}/socket`, ROUTE_WS_PATH: '/ws' })
  await until(() => wsRoute.app.credential.ready())
  const answer = await rawRequest(wsRoute.proxyPort, 'GET /%77s/live?x=1 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n', 1_000)
  t.equal(statusOf(answer), 101, 'the handshake switched')
  t.same(paths, ['/socket/live?x=1'], 'the handshake went to the route\'s base path, its prefix removed whole')
})

t.test('a path route cannot be escaped: dot segments, encoded or not, and encoded slashes are refused before any route', async (t) => {
  const [billing] = await upstreams(t, undefined, 1)
  const h = await build(t, { ROUTE_BILLING_BASE_URL: billing!.url, ROUTE_BILLING_PATH: '/billing' })
  await until(() => h.app.credential.ready())
  for (const target of ['/billing/../x', '/billing/%2e%2e/x', '/billing%2F..%2Fx', '/billing/..%2fx', '/billing/%252e%252e/x', '/billing/..;/x']) {
    t.equal(statusOf(await rawRequest(h.proxyPort, `GET ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)), 400, target)
  }
  t.equal(billing!.received.length + h.upstream.received.length, 0, 'nothing forwarded')
})

t.test('a port route: every path there goes to its upstream; PROXY_PORT knows nothing of it', async (t) => {
  const [reports] = await upstreams(t, undefined, 1)
  const h = await build(t, { ROUTE_REPORTS_BASE_URL: `${reports!.url}/r`, ROUTE_REPORTS_PORT: '0' })
  await until(() => h.app.credential.ready())
  const url = h.routeUrls.reports!
  t.equal((await send(`${url}/daily?d=1`)).status, 200)
  t.equal(reports!.received.at(-1)!.url, '/r/daily?d=1')
  t.equal((await send(`${h.proxyUrl}/reports/daily`)).status, 200)
  t.equal(h.upstream.received.at(-1)!.url, '/api/reports/daily', 'the default route on PROXY_PORT')
  t.equal(reports!.received.length, 1)
  t.match(h.log.records().filter((r) => r.msg === 'request').map((r) => r.route), ['reports', 'default'])
})

t.test('credentials: a route without AUTH_ settings shares the default one (one grant); one with its own client has its own token, sent to its upstream only', async (t) => {
  const [shared, own] = await upstreams(t, undefined, 2)
  const h = await build(t, {
    ROUTE_SHARED_BASE_URL: shared!.url,
    ROUTE_SHARED_PATH: '/shared',
    ROUTE_OWN_BASE_URL: own!.url,
    ROUTE_OWN_PATH: '/own',
    ROUTE_OWN_AUTH_CLIENT_ID: 'billing-app',
    ROUTE_OWN_AUTH_CLIENT_SECRET: 'billing-secret-77',
    ROUTE_OWN_AUTH_GRANT_TYPE: 'client_credentials',
    ROUTE_OWN_AUTH_USERNAME: '',
    ROUTE_OWN_AUTH_PASSWORD: ''
  }, { clients: { 'legacy-app': CLIENT_SECRET, 'billing-app': 'billing-secret-77' } })
  await until(() => h.app.routes.every((r) => r.credential.ready()))
  for (const path of ['/x', '/shared/x', '/own/x']) t.equal((await send(h.proxyUrl + path)).status, 200, path)
  t.match(identity(h, h.upstream), { client: 'legacy-app' })
  t.match(identity(h, shared!), { client: 'legacy-app' })
  t.match(identity(h, own!), { client: 'billing-app' })
  t.same(h.tokenServer.grants.map((g) => `${g.grantType} ${g.form.client_id}`).sort(), ['client_credentials billing-app', 'password legacy-app'], 'one grant per credential')
  t.equal(h.upstream.received.at(-1)!.headers.authorization, shared!.received.at(-1)!.headers.authorization, 'the shared route sends the default route\'s token')
  t.equal(await metric(h.adminUrl, 'auth_sidecar_token_grants_total{grant_type="client_credentials",outcome="success",route="own"}'), 1)
  t.equal(await metric(h.adminUrl, 'auth_sidecar_token_grants_total{grant_type="password",outcome="success",route="default"}'), 1)
  t.equal(await metric(h.adminUrl, 'auth_sidecar_proxy_request_duration_seconds_count{status="200",route="shared"}'), 1)
  t.ok((await metric(h.adminUrl, 'auth_sidecar_token_expires_in_seconds{route="own"}')) > 200)
})

t.test('a route that cannot get its token: 503 token_unavailable, never another route\'s token; readyz names it', async (t) => {
  const [own] = await upstreams(t, undefined, 1)
  const h = await build(t, {
    ROUTE_OWN_BASE_URL: own!.url,
    ROUTE_OWN_PATH: '/own',
    ROUTE_OWN_AUTH_CLIENT_ID: 'billing-app',
    ROUTE_OWN_AUTH_CLIENT_SECRET: 'a-wrong-secret',
    TOKEN_WAIT_MS: '100'
  }, { clients: { 'legacy-app': CLIENT_SECRET, 'billing-app': 'billing-secret-77' } })
  await until(() => h.app.credential.ready())
  await until(() => h.tokenServer.grants.some((g) => g.form.client_id === 'billing-app'))
  const res = await send(`${h.proxyUrl}/own/x`)
  t.equal(res.status, 503)
  t.equal(JSON.parse(res.body).error, 'token_unavailable')
  t.equal(own!.received.length, 0, 'nothing reached its upstream')
  t.equal((await send(`${h.proxyUrl}/x`)).status, 200, 'the default route serves')
  const ready = await send(`${h.adminUrl}/readyz`)
  t.equal(ready.status, 503)
  t.match(JSON.parse(ready.body), { status: 'not_ready', reason: /^route own: credentials rejected/, routes: { own: /credentials rejected/ } })
  t.notMatch(ready.body, /default/, 'the default route is not named: it can serve')
})

t.test('an upstream 401 on a route renews that route\'s token only, and the request is replayed', async (t) => {
  const [own] = await upstreams(t, undefined, 1)
  const h = await build(t, {
    ROUTE_OWN_BASE_URL: own!.url,
    ROUTE_OWN_PORT: '0',
    ROUTE_OWN_AUTH_CLIENT_ID: 'billing-app',
    ROUTE_OWN_AUTH_CLIENT_SECRET: 'billing-secret-77'
  }, { clients: { 'legacy-app': CLIENT_SECRET, 'billing-app': 'billing-secret-77' } })
  await until(() => h.app.routes.every((r) => r.credential.ready()))
  const route = h.app.routes.find((r) => r.config.name === 'own')!
  own!.rejectTokens.add(route.credential.current()!.header)
  const defaultToken = h.app.credential.current()!.header
  t.equal((await send(`${h.routeUrls.own!}/x`)).status, 200, 'replayed with a new token')
  t.same(h.tokenServer.grants.filter((g) => g.form.client_id === 'billing-app').map((g) => g.grantType), ['password', 'refresh_token'])
  t.equal(h.app.credential.current()!.header, defaultToken, 'the default route\'s token is untouched')
})

t.test('token exchange: the route\'s token is the default credential\'s exchanged for its audience, renewed by exchange, never logged', async (t) => {
  const { h, reports } = await withReportsExchange(t, { ROUTE_REPORTS_AUTH_EXCHANGE_SCOPE: 'reports' }, { accessTokenSeconds: 2 })
  t.equal((await send(`${h.proxyUrl}/reports/x`)).status, 200)
  t.match(identity(h, reports), { client: 'legacy-app', audience: 'reports-api' })
  t.equal((await send(`${h.proxyUrl}/x`)).status, 200)
  t.match(identity(h, h.upstream), { client: 'legacy-app', audience: 'account' }, 'the default route keeps its own token')
  const exchange = h.tokenServer.grants.find((g) => g.grantType === 'urn:ietf:params:oauth:grant-type:token-exchange')!
  t.same(Object.keys(exchange.form).sort(), ['audience', 'client_id', 'client_secret', 'grant_type', 'requested_token_type', 'scope', 'subject_token', 'subject_token_type'])
  t.match(exchange.form, {
    subject_token_type: 'urn:ietf:params:oauth:token-type:access_token',
    requested_token_type: 'urn:ietf:params:oauth:token-type:access_token',
    audience: 'reports-api',
    scope: 'reports',
    client_id: 'legacy-app'
  })
  // renewed before it expires, by a new exchange of the then-current subject token
  await until(() => h.tokenServer.grants.filter((g) => g.grantType.endsWith('token-exchange')).length >= 2, 4_000)
  const exchanges = h.tokenServer.grants.filter((g) => g.grantType.endsWith('token-exchange'))
  t.notOk(exchanges.some((g) => g.form.refresh_token !== undefined), 'never a refresh')
  t.equal(await metric(h.adminUrl, 'auth_sidecar_token_grants_total{grant_type="token_exchange",outcome="success",route="reports"}'), exchanges.length)
  const all = h.log.lines.join('\n')
  for (const g of h.tokenServer.grants) t.notOk(all.includes(g.form.subject_token ?? '!none!'), 'no subject token in the log')
  t.notMatch(all, /eyJ[A-Za-z0-9_-]{20,}\.eyJ/, 'no token at all in the log')
})

t.test('token exchange with a signed client assertion and DPoP: the exchange carries both, its token is bound to the same key and sent with a proof', async (t) => {
  const dir = t.testdir({ 'client.pem': generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }) as string })
  const { h, reports } = await withReportsExchange(t, {
    AUTH_CLIENT_SECRET: '',
    AUTH_CLIENT_AUTH: 'private_key_jwt',
    AUTH_CLIENT_KEY_FILE: join(dir, 'client.pem'),
    AUTH_DPOP: 'true'
  }, { dpop: { required: true } })
  t.equal((await send(`${h.proxyUrl}/reports/x`)).status, 200)
  const [grant, exchange] = h.tokenServer.grants
  t.equal(exchange!.grantType, 'urn:ietf:params:oauth:grant-type:token-exchange')
  t.equal(exchange!.clientAuth, 'jwt', 'the client authenticated by its signed assertion')
  t.equal(exchange!.form.client_secret, undefined)
  t.ok(exchange!.jkt !== undefined && exchange!.jkt === grant!.jkt, 'a DPoP proof with the sidecar\'s one key')
  const sent = reports.received.at(-1)!
  t.match(sent.headers.authorization, /^DPoP /)
  t.ok(typeof sent.headers.dpop === 'string', 'and a proof for the request')
  t.match(h.tokenServer.verify(sent.headers.authorization), { ok: true, audience: 'reports-api', jkt: grant!.jkt }, 'the exchanged token is bound to it')
})

t.test('token exchange refused: with an invalid subject token, the subject is renewed once and the refused one never sent again; refused outright, paced and 503', async (t) => {
  const { h, reports, route } = await withReportsExchange(t, { TOKEN_WAIT_MS: '300', TOKEN_REJECTED_RETRY_MS: '60000' })
  // the subject's session ends: its token is refused by the exchange
  const subject = h.app.credential.current()!.header.slice('Bearer '.length)
  h.tokenServer.revoke(subject)
  route.credential.answered(route.credential.current()!, 401, undefined, undefined)
  t.equal((await send(`${h.proxyUrl}/reports/x`)).status, 200, 'served with a new exchange of a new subject token')
  const exchanges = h.tokenServer.grants.filter((g) => g.grantType.endsWith('token-exchange'))
  t.equal(exchanges.length, 3, 'the first, the refused one, the one after the subject was renewed')
  t.equal(exchanges[1]!.status, 400)
  t.equal(exchanges[1]!.form.subject_token, subject)
  t.not(exchanges[2]!.form.subject_token, subject, 'the refused subject token is never sent again')
  t.same(exchanges.map((g) => g.status), [200, 400, 200])

  // exchange no longer allowed for the client: refused, paced like rejected credentials, the route fails closed
  h.tokenServer.exchange = {}
  await new Promise((resolve) => setTimeout(resolve, 1_100)) // past the back-off after the 401 above
  route.credential.answered(route.credential.current()!, 401, undefined, undefined)
  const res = await send(`${h.proxyUrl}/reports/x`)
  t.equal(res.status, 503)
  const before = h.tokenServer.grants.length
  await new Promise((resolve) => setTimeout(resolve, 1_000))
  t.equal(h.tokenServer.grants.length, before, 'no retry within a second: the slow pace')
  const subjectBefore = h.app.credential.current()!.header
  h.app.credential.answered(h.app.credential.current()!, 401, undefined, undefined)
  await until(() => h.app.credential.current()?.header !== subjectBefore, 2_000)
  await new Promise((resolve) => setTimeout(resolve, 300))
  t.same(h.tokenServer.grants.slice(before).map((g) => g.grantType), ['refresh_token'], 'the subject\'s new token is not exchanged: the refusal was not about it')
  t.equal((await send(`${h.proxyUrl}/x`)).status, 200, 'the default route still serves')
  t.equal(reports.received.length, 1, 'the route\'s upstream never got another route\'s token')
})

t.test('configuration mistakes are named at start, with the route, all at once', async (t) => {
  const { loadConfig } = await import('../../src/config/load.js')
  const { ConfigError } = await import('../../src/errors.js')
  const base = { BASE_URL: 'http://api.internal', AUTH_URL: 'http://kc', AUTH_CLIENT_ID: 'app', AUTH_USERNAME: 'u', AUTH_PASSWORD: 'p', ADMIN_PORT: '9090', PROXY_PORT: '8080' }
  const problems = (env: Record<string, string>): string[] => {
    try {
      loadConfig({ ...base, ...env }, { cwd: '/nonexistent' })
      return []
    } catch (err) {
      return (err as InstanceType<typeof ConfigError>).problems.slice()
    }
  }
  t.same(problems({
    ROUTE_A_PATH: '/a',
    ROUTE_B_BASE_URL: 'http://b', ROUTE_B_PORT: '8081', ROUTE_B_PATH: '/b',
    ROUTE_C_BASE_URL: 'http://c',
    ROUTE_D_BASE_URL: 'http://d', ROUTE_D_PATH: '/same',
    ROUTE_E_BASE_URL: 'http://e', ROUTE_E_PATH: '/same/',
    ROUTE_F_BASE_URL: 'http://f', ROUTE_F_PORT: '9090',
    ROUTE_G_BASE_URL: 'http://g', ROUTE_G_PORT: '8080',
    ROUTE_H_BASE_URL: 'http://h', ROUTE_H_PORT: '8082',
    ROUTE_I_BASE_URL: 'http://i', ROUTE_I_PORT: '8082',
    ROUTE_J_BASE_URL: 'http://j', ROUTE_J_PATH: '/j', ROUTE_J_AUTH_CLIENTID: 'x'
  }), [
    'ROUTE_J_AUTH_CLIENTID is not a route setting; did you mean ROUTE_J_AUTH_CLIENT_ID?',
    'ROUTE_A_BASE_URL is required',
    'route b: set exactly one of ROUTE_B_PORT (its own port) and ROUTE_B_PATH (a prefix on PROXY_PORT)',
    'route c: set exactly one of ROUTE_C_PORT (its own port) and ROUTE_C_PATH (a prefix on PROXY_PORT)',
    'route f: ROUTE_F_PORT is ADMIN_PORT; a route\'s port is its own (or use ROUTE_F_PATH for a prefix on PROXY_PORT)',
    'route g: ROUTE_G_PORT is PROXY_PORT; a route\'s port is its own (or use ROUTE_G_PATH for a prefix on PROXY_PORT)',
    'route e: ROUTE_E_PATH=/same is ROUTE_D_PATH\'s too: one route per prefix',
    'route i: ROUTE_I_PORT=8082 is ROUTE_H_PORT\'s too: one route per port'
  ])
  t.same(problems({ ROUTE_x_BASE_URL: 'http://x', ROUTE_x_PATH: '/x' }), ['ROUTE_x_BASE_URL is not a route setting; did you mean ROUTE_X_BASE_URL?', 'ROUTE_x_PATH is not a route setting; did you mean ROUTE_X_PATH?'], 'a name in lower case: the variable it meant, never itself')
  t.same(problems({ ROUTE_Y_BASE_URL: 'http://y', ROUTE_Y_PATH: '/y', ROUTE_Y_AUTH_CLIENT_SECRET_FIEL: 's' }), ['ROUTE_Y_AUTH_CLIENT_SECRET_FIEL is not a route setting; did you mean ROUTE_Y_AUTH_CLIENT_SECRET_FILE?'])
  t.same(problems({ ROUTE_DEFAULT_BASE_URL: 'http://x', ROUTE_DEFAULT_PATH: '/x' }), ['route default: the name is the default route\'s; choose another'])
  for (const path of ['/a/../b', '/v1..', '/a/./b', '/..v1']) {
    t.same(problems({ ROUTE_X_BASE_URL: 'http://x', ROUTE_X_PATH: path }), ['ROUTE_X_PATH must be a path prefix such as /billing: segments of letters, digits and -._~, none of them . or holding ..'], path)
  }
  t.same(problems({ ROUTE_X_BASE_URL: 'http://x', ROUTE_X_PATH: '/v1.2' }), [], 'a dot within a segment is fine')
  t.same(problems({ ROUTE_X_BASE_URL: 'http://x', ROUTE_X_PATH: '/x', ROUTE_X_AUTH_CLIENT_AUTH: 'private_key_jwt' }), ['route x: ROUTE_X_AUTH_CLIENT_KEY_FILE is required with AUTH_CLIENT_AUTH=private_key_jwt'.replace('ROUTE_X_AUTH_CLIENT_KEY_FILE', 'AUTH_CLIENT_KEY_FILE').replace('AUTH_CLIENT_AUTH=', 'ROUTE_X_AUTH_CLIENT_AUTH=')])
  t.same(problems({ ROUTE_X_BASE_URL: 'http://x', ROUTE_X_PATH: '/x', ROUTE_X_AUTH_EXCHANGE_SCOPE: 'a' }), ['route x: ROUTE_X_AUTH_EXCHANGE_SCOPE is used only with ROUTE_X_AUTH_EXCHANGE_AUDIENCE'])
  t.same(problems({ ROUTE_A_B_BASE_URL: 'http://x', ROUTE_A_B_PORT: '8090' }), [], 'a name with _: ROUTE_A_B_PORT is route a_b\'s PORT')
  t.same(problems({ ROUTE_X_SERVICE_HOST: '10.0.0.1', ROUTE_X_PORT: 'tcp://10.0.0.1:80', ROUTE_X_PORT_80_TCP: 'tcp://10.0.0.1:80' }), [], 'Kubernetes\' service links are no routes')
})

/** Keycloak's refusal of an exchange's subject token. */
const SUBJECT_REFUSED = { status: 400, body: JSON.stringify({ error: 'invalid_grant', error_description: 'Invalid token' }) }
const EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange'

t.test('token exchange refused every time while the auth server fails the subject\'s renewal: the refused subject is never sent again, and the subject\'s valid token keeps serving its routes', async (t) => {
  const [reports, shared] = await upstreams(t, undefined, 2)
  const h = await build(t, {
    ROUTE_REPORTS_BASE_URL: reports!.url,
    ROUTE_REPORTS_PATH: '/reports',
    ROUTE_SHARED_BASE_URL: shared!.url,
    ROUTE_SHARED_PATH: '/shared',
    ROUTE_REPORTS_AUTH_EXCHANGE_AUDIENCE: 'reports-api',
    TOKEN_WAIT_MS: '300',
    TOKEN_REJECTED_RETRY_MS: '400'
  }, { exchange: { 'legacy-app': ['reports-api'] } })
  await until(() => h.app.routes.every((r) => r.credential.ready()))
  const subject = h.app.credential.current()!.header.slice('Bearer '.length)
  h.tokenServer.faultFor = (form) => form.grant_type === EXCHANGE
    ? SUBJECT_REFUSED
    : { status: 500, body: '{"error":"unknown_error"}' }
  const route = h.app.routes.find((r) => r.config.name === 'reports')!
  route.credential.answered(route.credential.current()!, 401, undefined, undefined)

  const statuses: number[] = []
  const started = Date.now()
  while (Date.now() - started < 2_500) {
    statuses.push((await send(`${h.proxyUrl}/x`)).status, (await send(`${h.proxyUrl}/shared/x`)).status)
    await new Promise((resolve) => setTimeout(resolve, 40))
  }
  t.same([...new Set(statuses)], [200], `${statuses.length} requests on the default route and the one sharing its credential, every one 200`)
  const ready = JSON.parse((await send(`${h.adminUrl}/readyz`)).body) as { routes?: Record<string, string> }
  t.same(Object.keys(ready.routes ?? {}), ['reports'], 'only the exchanged route is not ready')
  const exchanges = h.tokenServer.grants.filter((g) => g.grantType === EXCHANGE)
  t.equal(exchanges.filter((g) => g.form.subject_token === subject && g.status === 400).length, 1, 'the refused subject token was sent once, never again')
  t.equal(h.app.credential.current()?.header, `Bearer ${subject}`, 'the subject\'s valid token is kept while its renewal fails')
  const subjectGrants = h.tokenServer.grants.filter((g) => g.grantType !== EXCHANGE && g.status === 500)
  t.ok(subjectGrants.length >= 1, `the subject's renewal was asked for (${subjectGrants.length} attempts, on its own backoff)`)

  // the auth server recovers: the subject's new token is exchanged at once; refused again, paced
  h.tokenServer.faultFor = (form) => form.grant_type === EXCHANGE ? SUBJECT_REFUSED : undefined
  await until(() => h.app.credential.current()?.header !== `Bearer ${subject}`, 5_000)
  await until(() => h.tokenServer.grants.filter((g) => g.grantType === EXCHANGE).length > exchanges.length, 2_000)
  const renewed = h.app.credential.current()!.header.slice('Bearer '.length)
  await new Promise((resolve) => setTimeout(resolve, 1_500))
  const after = h.tokenServer.grants.filter((g) => g.grantType === EXCHANGE).slice(exchanges.length)
  t.ok(after.every((g) => g.form.subject_token === renewed), 'refused again, the renewed subject token is what the paced retries send')
  t.equal(h.tokenServer.grants.filter((g) => g.grantType !== EXCHANGE && g.status === 200).length, 2, 'the subject renewed once for the exchange, not once per retry: its first grant and that renewal')
  const gaps = after.slice(1).map((g, i) => g.at - after[i]!.at)
  t.ok(after.length >= 2 && gaps.every((gap) => gap >= 300), `refused again: paced, not a loop of renewals and exchanges (${after.length} exchanges, ${gaps.join(', ')} ms apart, at a 0.4 s pace)`)
  t.notOk(after.some((g) => g.form.subject_token === subject), 'nor the first one')
})

t.test('token exchange refused for the client\'s credentials: tried again as soon as the subject holds a new token, not at the slow pace', async (t) => {
  const { h, route } = await withReportsExchange(t, { TOKEN_REJECTED_RETRY_MS: '60000' })
  h.tokenServer.faultFor = (form) => form.grant_type === EXCHANGE ? { status: 401, body: JSON.stringify({ error: 'invalid_client', error_description: 'Invalid client or Invalid client credentials' }) } : undefined
  route.credential.answered(route.credential.current()!, 401, undefined, undefined)
  await until(() => h.tokenServer.grants.some((g) => g.grantType === EXCHANGE && g.status === 401))
  // the secret is mended; the subject renews, with the same client
  h.tokenServer.faultFor = undefined
  const subject = h.app.credential.current()!.header
  h.app.credential.answered(h.app.credential.current()!, 401, undefined, undefined)
  await until(() => h.app.credential.current()?.header !== subject, 2_000)
  await until(() => h.tokenServer.grants.filter((g) => g.grantType === EXCHANGE).at(-1)?.status === 200, 2_000)
  t.equal((await send(`${h.proxyUrl}/reports/x`)).status, 200, 'the route serves again, a minute before the slow pace would have tried')
})

t.test('hanging token requests of two exchange routes do not hold up another credential\'s renewal', async (t) => {
  const [a, b] = await upstreams(t, undefined, 2)
  const h = await build(t, {
    ROUTE_A_BASE_URL: a!.url,
    ROUTE_A_PATH: '/a',
    ROUTE_A_AUTH_EXCHANGE_AUDIENCE: 'a-api',
    ROUTE_B_BASE_URL: b!.url,
    ROUTE_B_PATH: '/b',
    ROUTE_B_AUTH_EXCHANGE_AUDIENCE: 'b-api',
    TOKEN_WAIT_MS: '2000',
    TOKEN_TIMEOUT_MS: '10000'
  }, { exchange: { 'legacy-app': ['a-api', 'b-api'] } })
  await until(() => h.app.routes.every((r) => r.credential.ready()))
  h.tokenServer.faultFor = (form) => form.grant_type === EXCHANGE ? { hang: true } : undefined
  for (const name of ['a', 'b']) {
    const route = h.app.routes.find((r) => r.config.name === name)!
    route.credential.answered(route.credential.current()!, 401, undefined, undefined)
  }
  await until(() => h.tokenServer.grants.filter((g) => g.grantType === EXCHANGE && g.status === 0).length === 2)
  // the default route's token is refused upstream: its renewal must go now
  h.upstream.rejectTokens.add(h.app.credential.current()!.header)
  const res = await send(`${h.proxyUrl}/x`)
  t.equal(res.status, 200, 'renewed and replayed while the exchanges hang')
  t.equal(h.tokenServer.grants.filter((g) => g.grantType === 'refresh_token' && g.status === 200).length, 1)
})

t.test('an exchange answer that is not an access token, or a token no upstream would take, is not used: unready, 503, nothing sent', async (t) => {
  const { h, reports, route } = await withReportsExchange(t, {
    TOKEN_WAIT_MS: '200',
    // unusable answers are retried with a backoff that grows to this
    TOKEN_REJECTED_RETRY_MS: '300'
  })
  const answers = [
    ['a refresh token', { access_token: 'eyJhbGciOiJIUzI1NiJ9.e30.sig', token_type: 'Bearer', expires_in: 300, issued_token_type: 'urn:ietf:params:oauth:token-type:refresh_token' }, /issued_token_type "urn:ietf:params:oauth:token-type:refresh_token", not an access token/],
    ['an ID token', { access_token: 'eyJhbGciOiJIUzI1NiJ9.e30.sig', token_type: 'Bearer', expires_in: 300, issued_token_type: 'urn:ietf:params:oauth:token-type:id_token' }, /issued_token_type "urn:ietf:params:oauth:token-type:id_token"/],
    ['a 200 KB token', { access_token: 'a'.repeat(200 * 1024), token_type: 'Bearer', expires_in: 300, issued_token_type: 'urn:ietf:params:oauth:token-type:access_token' }, /access_token is 204800 bytes, more than the 16384 an upstream takes in a header/]
  ] as const
  for (const [what, body, reason] of answers) {
    h.tokenServer.faultFor = (form) => form.grant_type === EXCHANGE ? { status: 200, body: JSON.stringify(body) } : undefined
    const held = route.credential.current()
    if (held !== undefined) route.credential.answered(held, 401, undefined, undefined)
    await until(() => h.log.records().some((r) => r.grant === 'token_exchange' && reason.test(String(r.reason))), 3_000)
    const res = await send(`${h.proxyUrl}/reports/x`)
    t.equal(res.status, 503, `${what}: 503`)
    t.equal(JSON.parse(res.body).error, 'token_unavailable')
    const ready = await send(`${h.adminUrl}/readyz`)
    t.equal(ready.status, 503, `${what}: not ready`)
    t.match(JSON.parse(ready.body).routes, { reports: /without a usable token/ })
  }
  t.equal(reports.received.length, 0, 'nothing reached the route\'s upstream')
})
