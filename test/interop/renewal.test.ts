// Renewal against oidc-provider: access tokens that live a few seconds,
// replaced before they expire by new client_credentials grants (no refresh
// token), with steady traffic that never fails.
import t from 'tap'
import { send } from '../helpers/build.js'
import { API_CLIENT, serviceClient, startProvider, startSidecar, tokenCheckingApi } from '../helpers/oidc-provider.js'

const SECRET = 'renewal-sidecar-secret-7d8e'
const TTL = 4

t.test('a short-lived token is renewed before it expires, with a new client_credentials grant; no request fails', async (t) => {
  const op = await startProvider(t, { accessTokenTtl: TTL, clients: [API_CLIENT, serviceClient({ client_id: 'orders-sidecar', client_secret: SECRET, token_endpoint_auth_method: 'client_secret_basic' })] })
  const api = await tokenCheckingApi(t, op)
  const s = await startSidecar(t, op, api.url, { AUTH_CLIENT_ID: 'orders-sidecar', AUTH_CLIENT_SECRET: SECRET, AUTH_CLIENT_AUTH: 'client_secret_basic' })

  // traffic until the server has made two renewals (three grants), paced as an application's
  let renewed = false
  const third = op.event('grant.success', { after: 2, ms: 4 * TTL * 1000 }).finally(() => { renewed = true })
  const statuses: number[] = []
  while (!renewed) {
    statuses.push((await send(`${s.proxyUrl}/orders`)).status)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  await third
  statuses.push((await send(`${s.proxyUrl}/orders`)).status)

  t.ok(statuses.length > 10, `${statuses.length} requests across the renewals`)
  t.same([...new Set(statuses)], [200], 'every request answered 200')
  t.same([...new Set(api.calls.map((c) => c.status))], [200], 'the API judged every token the server\'s, active')
  const grants = op.tokenRequests()
  t.same(grants.map((g) => [g.grantType, g.status]), [['client_credentials', 200], ['client_credentials', 200], ['client_credentials', 200]], 'each renewal a new client_credentials grant: there is no refresh token')
  for (let i = 1; i < grants.length; i++) {
    t.ok(grants[i]!.at - grants[i - 1]!.at < TTL * 1000, `renewal ${i} ${grants[i]!.at - grants[i - 1]!.at} ms after the grant before, within its ${TTL} s`)
  }
  // the tokens the API saw: each one still active when used, and more than one
  const seen = new Set(api.calls.map((c) => c.token?.iat))
  t.ok(seen.size >= 2, 'the renewed tokens were used')
  t.same(op.events.filter((e) => e.name === 'grant.error'), [], 'the server refused nothing')
})
