// DPoP-bound tokens (RFC 9449) from oidc-provider, with and without the
// server's nonces; an API that checks each proof against the token's key.
import { randomBytes } from 'node:crypto'
import t from 'tap'
import { send, until } from '../helpers/build.js'
import { start } from '../helpers/process.js'
import { API_CLIENT, serviceClient, sidecarEnv, startProvider, startSidecar, tokenCheckingApi } from '../helpers/oidc-provider.js'

const SECRET = 'dpop-sidecar-secret-4e5f6a'
const CLIENT = serviceClient({ client_id: 'orders-sidecar', client_secret: SECRET, token_endpoint_auth_method: 'client_secret_basic', dpop_bound_access_tokens: true })
const ENV = { AUTH_CLIENT_ID: 'orders-sidecar', AUTH_CLIENT_SECRET: SECRET, AUTH_CLIENT_AUTH: 'client_secret_basic', AUTH_DPOP: 'true' }

t.test('DPoP without server nonces: a DPoP token from the first request, each API request proved with its key', async (t) => {
  const op = await startProvider(t, { clients: [API_CLIENT, CLIENT] })
  const api = await tokenCheckingApi(t, op)
  const s = await startSidecar(t, op, api.url, ENV)
  for (const path of ['/orders', '/orders/7?expand=lines']) {
    const reply = await send(`${s.proxyUrl}${path}`, { method: path === '/orders' ? 'GET' : 'POST', body: path === '/orders' ? undefined : '{}' })
    t.equal(reply.status, 200, `${path}: ${reply.body}`)
  }
  t.same(op.tokenRequests().map((r) => [r.status, r.dpop, r.dpopNonce, r.tokenType]), [[200, true, undefined, 'DPoP']], 'one token request, with a proof, no nonce asked for')
  t.same(api.calls.map((c) => [c.method, c.scheme, c.status]), [['GET', 'DPoP', 200], ['POST', 'DPoP', 200]], 'DPoP, and the API checked the proof of every request')
  t.type((api.calls[0]!.token?.cnf as { jkt?: string }).jkt, 'string', 'the server bound the token to the sidecar\'s key')
})

t.test('DPoP with server nonces: use_dpop_nonce answered by one retry with the nonce, the nonce then sent from the start', async (t) => {
  const op = await startProvider(t, {
    clients: [API_CLIENT, CLIENT],
    // renewals come every few seconds: the second grant shows the nonce kept
    accessTokenTtl: 4,
    features: { dPoP: { enabled: true, nonceSecret: randomBytes(32), requireNonce: () => true } }
  })
  const api = await tokenCheckingApi(t, op)
  const s = await startSidecar(t, op, api.url, ENV)
  const first = op.tokenRequests()
  t.same(first.map((r) => [r.status, r.error, r.dpopNonce === undefined]), [[400, 'use_dpop_nonce', true], [200, undefined, false]], 'refused for want of a nonce, then granted with it')
  t.equal(first[1]!.dpopNonce, first[0]!.answeredNonce, 'the nonce the server sent')
  t.equal((await send(`${s.proxyUrl}/orders`)).status, 200)
  t.equal(api.calls.at(-1)!.scheme, 'DPoP')

  // the renewal: its proof carries the newest nonce, without being refused first
  await op.event('grant.success', { after: 1 })
  const renewal = op.tokenRequests().slice(2)
  t.same(renewal.map((r) => [r.status, r.error]), [[200, undefined]], 'no use_dpop_nonce on renewal')
  const newest = [...first].reverse().find((r) => r.answeredNonce !== undefined)!.answeredNonce
  t.equal(renewal[0]!.dpopNonce, newest, 'the newest nonce the server sent')
  t.equal((await send(`${s.proxyUrl}/orders`)).status, 200, 'the renewed token works')
  t.equal(op.events.filter((e) => e.name === 'grant.error').length, 1, 'the only error the server recorded is the first, nonce-less, request')
})

t.test('DPoP: the algorithm comes from what the server offers (dpop_signing_alg_values_supported)', async (t) => {
  const op = await startProvider(t, { clients: [API_CLIENT, CLIENT], configuration: { enabledJWA: { dPoPSigningAlgValues: ['EdDSA'] } } })
  const api = await tokenCheckingApi(t, op)
  const discovery = { AUTH_TOKEN_URL: '', AUTH_ISSUER_URL: op.issuer }

  // no algorithm set: one the server offers is chosen
  const s = await startSidecar(t, op, api.url, { ...ENV, ...discovery })
  t.equal((await send(`${s.proxyUrl}/orders`)).status, 200)
  t.same(op.tokenRequests().map((r) => [r.status, r.dpop]), [[200, true]], 'the server took the proof at once')

  // one it does not offer: a configuration error naming the setting and what is offered
  const refused = start(sidecarEnv(op, api.url, { ...ENV, ...discovery, AUTH_DPOP_ALG: 'ES256', PROXY_PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1' }))
  t.teardown(() => { refused.child.kill('SIGKILL') })
  const output = (): string => refused.stdout.join('\n') + refused.stderr.join('')
  await until(() => /AUTH_DPOP_ALG/.test(output()), 30_000).catch(() => {})
  t.match(output(), /AUTH_DPOP_ALG\b.*EdDSA/, 'names AUTH_DPOP_ALG and the algorithms offered')
  t.equal(op.tokenRequests().length, 1, 'no token request with an algorithm the server refuses')
})
