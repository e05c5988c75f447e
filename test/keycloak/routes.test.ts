import { send } from '../helpers/build.js'
import { keycloakTest, type Realm } from '../helpers/keycloak.js'
import { spawnSidecar, untilReady } from '../helpers/process.js'
import { resourceServer } from '../helpers/resource-server.js'

const SECRET = 'legacy-app-secret-8f2d'
const PASSWORD = 'service-user-password-5e1f'
const SERVICE_SECRET = 'service-app-secret-3c7a'

/**
 * The realm's way to a token for `reports-api` by standard token exchange:
 * the API as a client, a client scope `reports` whose audience mapper names
 * it, optional for legacy-app, and legacy-app allowed to exchange.
 */
async function withReportsApi (realm: Realm): Promise<void> {
  await realm.api('POST', '/clients', { clientId: 'reports-api', enabled: true, publicClient: false, secret: 'reports-api-secret-2a9c', standardFlowEnabled: false, directAccessGrantsEnabled: false })
  await realm.api('POST', '/client-scopes', {
    name: 'reports',
    protocol: 'openid-connect',
    attributes: { 'include.in.token.scope': 'true' },
    protocolMappers: [{ name: 'reports-audience', protocol: 'openid-connect', protocolMapper: 'oidc-audience-mapper', config: { 'included.client.audience': 'reports-api', 'access.token.claim': 'true' } }]
  })
  const [scope] = await realm.api<Array<{ id: string, name: string }>>('GET', '/client-scopes').then((all) => all.filter((s) => s.name === 'reports'))
  await realm.api('PUT', `/clients/${await realm.clientUuid('legacy-app')}/optional-client-scopes/${scope!.id}`)
  await realm.updateClient('legacy-app', { attributes: { 'standard.token.exchange.enabled': 'true' } })
}

keycloakTest('routes against Keycloak: each route\'s API gets its own identity, one by token exchange; one LOGIN per credential; a refused exchange fails closed', async (t, kc) => {
  const realm = await kc.root.realm(t, { accessTokenLifespan: 4 })
  await withReportsApi(realm)
  const [orders, billing, reports, shared] = await Promise.all([0, 1, 2, 3].map(async () => await resourceServer(t, realm.issuer, realm.jwksUrl)))
  const sidecar = await spawnSidecar(t, orders!.url, '', PASSWORD, {
    AUTH_ISSUER_URL: realm.issuer,
    AUTH_CLIENT_SECRET: SECRET,
    ROUTE_BILLING_BASE_URL: billing!.url,
    ROUTE_BILLING_PATH: '/billing',
    ROUTE_BILLING_AUTH_CLIENT_ID: 'service-app',
    ROUTE_BILLING_AUTH_CLIENT_SECRET: SERVICE_SECRET,
    ROUTE_BILLING_AUTH_GRANT_TYPE: 'client_credentials',
    ROUTE_REPORTS_BASE_URL: reports!.url,
    ROUTE_REPORTS_PORT: '0',
    ROUTE_REPORTS_AUTH_EXCHANGE_AUDIENCE: 'reports-api',
    ROUTE_REPORTS_AUTH_EXCHANGE_SCOPE: 'reports',
    ROUTE_SHARED_BASE_URL: shared!.url,
    ROUTE_SHARED_PATH: '/shared'
  })
  await untilReady(sidecar)
  const targets = [`${sidecar.proxyUrl}/orders`, `${sidecar.proxyUrl}/billing/invoices`, `${sidecar.routeUrls.reports!}/daily`, `${sidecar.proxyUrl}/shared/x`]
  const statuses: number[] = []
  const until10s = Date.now() + 10_000
  while (Date.now() < until10s) {
    for (const url of targets) statuses.push((await send(url)).status)
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  t.same([...new Set(statuses)], [200], `${statuses.length} requests, every one accepted`)
  const claimsOf = (api: typeof orders): Array<Record<string, unknown>> => api!.verdicts.map((v) => v.claims as Record<string, unknown>)
  t.same(new Set(claimsOf(orders).map((c) => `${c.azp as string} ${c.preferred_username as string}`)), new Set(['legacy-app service-user']), 'the default route: the service user through legacy-app')
  t.same(new Set(claimsOf(billing).map((c) => c.azp)), new Set(['service-app']), 'billing: its own client\'s service account')
  t.same(new Set(claimsOf(reports).map((c) => `${c.azp as string} ${String(c.aud)} ${c.preferred_username as string}`)), new Set(['legacy-app reports-api service-user']), 'reports: the service user\'s token exchanged for reports-api')
  // the same session: one credential's tokens (a renewal between the last round's requests may reach one route only)
  const sessions = (api: typeof orders): Set<string> => new Set(claimsOf(api).map((c) => `${c.azp as string} ${c.sid as string}`))
  t.same(sessions(shared), sessions(orders), 'shared: the default route\'s own tokens')
  t.equal(sessions(orders).size, 1)
  t.ok(new Set(reports!.verdicts.map((v) => v.token)).size >= 2, 'the exchanged token was renewed')

  t.equal((await realm.events(['LOGIN'])).length, 1, 'one password grant for the default route and the one sharing it')
  const exchanges = await realm.events(['TOKEN_EXCHANGE', 'TOKEN_EXCHANGE_ERROR'])
  t.ok(exchanges.length >= 2 && exchanges.every((e) => e.type === 'TOKEN_EXCHANGE' && e.clientId === 'legacy-app'), `${exchanges.length} exchanges, none refused`)
  t.ok((await realm.events(['CLIENT_LOGIN'])).every((e) => e.clientId === 'service-app'), 'client_credentials grants by service-app only')

  // the client may no longer exchange: the route fails closed when its token runs out, the others go on
  await realm.updateClient('legacy-app', { attributes: { 'standard.token.exchange.enabled': 'false' } })
  await new Promise((resolve) => setTimeout(resolve, 5_000)) // the exchanged token's 4 s run out
  const after = { reports: (await send(`${sidecar.routeUrls.reports!}/daily`)), orders: (await send(`${sidecar.proxyUrl}/orders`)), billing: (await send(`${sidecar.proxyUrl}/billing/x`)) }
  t.equal(after.reports.status, 503)
  t.equal(JSON.parse(after.reports.body).error, 'token_unavailable')
  t.equal(after.orders.status, 200)
  t.equal(after.billing.status, 200)
  const refusals = await realm.events(['TOKEN_EXCHANGE_ERROR'])
  t.equal(refusals.length, 1, 'refused once: paced, not exchanged again with each new subject token')
  const ready = await send(`${sidecar.adminUrl}/readyz`)
  t.equal(ready.status, 503)
  t.match(JSON.parse(ready.body), { routes: { reports: /refused/ } })
  t.match(sidecar.run.stdout.join('\n'), /Standard token exchange is not enabled for the requested client/, 'the log says why')

  sidecar.run.child.kill('SIGTERM')
  t.equal(await sidecar.run.exited, 0)
  t.same(await realm.sessions('service-user'), [], 'the one session ended, once')
  const logouts = await realm.events(['LOGOUT', 'LOGOUT_ERROR'])
  t.same(logouts.map((e) => e.type), ['LOGOUT'])
  t.notMatch(sidecar.run.stdout.join('\n'), new RegExp(`${PASSWORD}|${SECRET}|${SERVICE_SECRET}|eyJ`), 'no secret or token logged')
})
