import t from 'tap'
import { TokenServer } from '../../dev/token-server.js'
import { build, CLIENT_SECRET, PASSWORD, send, until } from '../helpers/build.js'

t.test('a named route\'s refused grant is logged with the variables the route set, and the default route\'s for the rest', async (t) => {
  const h = await build(t, {
    ROUTE_BILLING_BASE_URL: 'http://127.0.0.1:9/billing',
    ROUTE_BILLING_PATH: '/billing',
    ROUTE_BILLING_AUTH_CLIENT_ID: 'billing-app',
    ROUTE_BILLING_AUTH_CLIENT_SECRET: 'a-wrong-secret-41'
  }, { clients: { 'legacy-app': 'client-secret-1a2b3c', 'billing-app': 'billing-secret-77' } })
  const refused = (): Record<string, unknown> | undefined => h.log.records().find((r) => r.route === 'billing' && r.outcome === 'rejected')
  await until(() => refused() !== undefined)
  const reason = String(refused()!.reason)
  t.match(reason, /ROUTE_BILLING_AUTH_CLIENT_ID and ROUTE_BILLING_AUTH_CLIENT_SECRET/, 'the route\'s own client and secret are named as it set them')
  t.match(reason, /and AUTH_CLIENT_AUTH \(/, 'the client authentication it takes from the default route keeps its name')
  t.notMatch(reason, /a-wrong-secret-41/, 'the secret is not said')
})

t.test('a named route\'s wrong token URL is named as the route set it, in the log and in readiness', async (t) => {
  const h = await build(t, {
    ROUTE_BILLING_BASE_URL: 'http://127.0.0.1:9/billing',
    ROUTE_BILLING_PATH: '/billing',
    ROUTE_BILLING_AUTH_CLIENT_ID: 'billing-app',
    ROUTE_BILLING_AUTH_TOKEN_URL: '{issuer}/not-a-token-endpoint',
    ROUTE_BILLING_AUTH_CLIENT_SECRET: 'client-secret-1a2b3c',
    ROUTE_BILLING_AUTH_PASSWORD: 'service-password-9f8e7d',
    TOKEN_WAIT_MS: '100'
  }, { clients: { 'legacy-app': 'client-secret-1a2b3c', 'billing-app': 'client-secret-1a2b3c' } })
  const wrong = (): Record<string, unknown> | undefined => h.log.records().find((r) => r.route === 'billing' && String(r.msg).startsWith('wrong token URL'))
  await until(() => wrong() !== undefined)
  t.match(String(wrong()!.msg), /check ROUTE_BILLING_AUTH_URL and ROUTE_BILLING_AUTH_REALM, or set ROUTE_BILLING_AUTH_TOKEN_URL /, 'the log line names the route\'s own variables: it takes none of the default\'s auth server')
  const ready = await send(`${h.adminUrl}/readyz`)
  t.equal(ready.status, 503)
  t.match(JSON.parse(ready.body).routes.billing, /set ROUTE_BILLING_AUTH_URL and ROUTE_BILLING_AUTH_REALM, ROUTE_BILLING_AUTH_ISSUER_URL, or ROUTE_BILLING_AUTH_TOKEN_URL\)/, 'readiness names it too')
})

t.test('a named route\'s own auth server in the other Keycloak layout: the warning names the route\'s token URL variable', async (t) => {
  // Keycloak 17+ serves no /auth prefix: the route's AUTH_URL gives the older layout first
  const billingServer = new TokenServer({ clients: { 'billing-app': CLIENT_SECRET }, users: { 'service-user': PASSWORD }, tokenPath: '/realms/service-realm/protocol/openid-connect/token' })
  await billingServer.listen()
  t.teardown(async () => { await billingServer.close() })
  const h = await build(t, {
    ROUTE_BILLING_BASE_URL: 'http://127.0.0.1:9/billing',
    ROUTE_BILLING_PATH: '/billing',
    ROUTE_BILLING_AUTH_URL: billingServer.url,
    ROUTE_BILLING_AUTH_CLIENT_ID: 'billing-app',
    ROUTE_BILLING_AUTH_CLIENT_SECRET: CLIENT_SECRET,
    ROUTE_BILLING_AUTH_PASSWORD: PASSWORD
  })
  const warned = (): Record<string, unknown> | undefined => h.log.records().find((r) => r.route === 'billing' && String(r.msg).includes('the token endpoint answers at'))
  await until(() => warned() !== undefined)
  t.match(String(warned()!.msg), `Set ROUTE_BILLING_AUTH_TOKEN_URL=${billingServer.tokenUrl} to skip the first try`)
  t.equal(billingServer.grants.length, 1, 'the route got its token from the layout it found')
})
