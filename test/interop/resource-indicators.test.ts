// AUTH_TOKEN_PARAMS against oidc-provider's resource indicators (RFC 8707):
// a `resource` sent with every grant gets a JWT access token for that API.
import t from 'tap'
import { send } from '../helpers/build.js'
import { API_CLIENT, serviceClient, startProvider, startSidecar, tokenCheckingApi } from '../helpers/oidc-provider.js'

const SECRET = 'resource-sidecar-secret-8f9a'
const RESOURCE = 'https://orders.example.com/'

t.test('AUTH_TOKEN_PARAMS=resource=...: every grant names the API, whose JWT access token it gets, with its audience and scope', async (t) => {
  const op = await startProvider(t, {
    accessTokenTtl: 4,
    jwtResource: { resource: RESOURCE, scope: 'orders:read' },
    clients: [API_CLIENT, serviceClient({ client_id: 'orders-sidecar', client_secret: SECRET, token_endpoint_auth_method: 'client_secret_basic', scope: 'orders:read' })]
  })
  const api = await tokenCheckingApi(t, op, { jwtAudience: RESOURCE })
  const s = await startSidecar(t, op, api.url, {
    AUTH_CLIENT_ID: 'orders-sidecar',
    AUTH_CLIENT_SECRET: SECRET,
    AUTH_CLIENT_AUTH: 'client_secret_basic',
    AUTH_SCOPE: 'orders:read',
    AUTH_TOKEN_PARAMS: `resource=${encodeURIComponent(RESOURCE)}`
  })
  const reply = await send(`${s.proxyUrl}/orders`)
  t.equal(reply.status, 200, reply.body)
  t.match(api.calls[0]!.token, { aud: RESOURCE, client_id: 'orders-sidecar', scope: 'orders:read' }, 'a JWT for that API, verified with the server\'s keys')

  // the renewal names it again
  await op.event('grant.success', { after: 1 })
  t.same(op.tokenRequests().map((r) => [r.status, r.fields.includes('resource'), r.scope]), [[200, true, 'orders:read'], [200, true, 'orders:read']])
  t.equal((await send(`${s.proxyUrl}/orders`)).status, 200)
})
