// Discovery against oidc-provider: its OpenID Connect document and its
// RFC 8414 metadata, found from the issuer or named in full, and issuers
// compared exactly.
import t, { type Test } from 'tap'
import { send, until } from '../helpers/build.js'
import { start } from '../helpers/process.js'
import { API_CLIENT, serviceClient, sidecarEnv, startProvider, startSidecar, tokenCheckingApi, type ProviderOptions, type RunningProvider } from '../helpers/oidc-provider.js'

const SECRET = 'discovery-sidecar-secret-2b3c'
const ENV = { AUTH_CLIENT_ID: 'orders-sidecar', AUTH_CLIENT_SECRET: SECRET, AUTH_CLIENT_AUTH: 'client_secret_basic', AUTH_TOKEN_URL: '' }
const clients = [API_CLIENT, serviceClient({ client_id: 'orders-sidecar', client_secret: SECRET, token_endpoint_auth_method: 'client_secret_basic' })]

/** A provider, an API, and a sidecar with `env` that found its endpoints by discovery; the API reached through it. */
async function discovered (t: Test, options: Omit<ProviderOptions, 'clients'>, env: (op: RunningProvider) => Record<string, string>): Promise<RunningProvider> {
  const op = await startProvider(t, { clients, ...options })
  const api = await tokenCheckingApi(t, op)
  const s = await startSidecar(t, op, api.url, { ...ENV, ...env(op) })
  const reply = await send(`${s.proxyUrl}/orders`)
  t.equal(reply.status, 200, reply.body)
  t.same(JSON.parse(reply.body), { client_id: 'orders-sidecar' }, 'a token from the endpoint the document named')
  t.match(op.tokenRequests().map((r) => r.status), [200])
  return op
}

function documentsFetched (op: RunningProvider): Array<[string, number]> {
  return op.requests.filter((r) => r.path.includes('/.well-known/')).map((r) => [r.path, r.status])
}

t.test('AUTH_ISSUER_URL under a path: the OpenID Connect document at the issuer\'s /.well-known/openid-configuration', async (t) => {
  const op = await discovered(t, { issuerPath: '/tenant-a' }, (op) => ({ AUTH_ISSUER_URL: op.issuer }))
  t.same(documentsFetched(op)[0], ['/tenant-a/.well-known/openid-configuration', 200])
  t.equal(op.tokenRequests()[0]!.path, '/tenant-a/token')
})

t.test('AUTH_ISSUER_URL of a server without an OpenID Connect document: its RFC 8414 metadata, the issuer\'s path after the well-known segment', async (t) => {
  const op = await discovered(t, { issuerPath: '/tenant-a', noOpenIdDocument: true }, (op) => ({ AUTH_ISSUER_URL: op.issuer }))
  t.same(documentsFetched(op).at(-1), ['/.well-known/oauth-authorization-server/tenant-a', 200], 'RFC 8414 section 3.1\'s location')
})

t.test('AUTH_ISSUER_URL a bare origin: either document at the origin', async (t) => {
  const [openid, oauth] = await Promise.all([
    discovered(t, {}, (op) => ({ AUTH_ISSUER_URL: op.issuer })),
    discovered(t, { noOpenIdDocument: true }, (op) => ({ AUTH_ISSUER_URL: op.issuer }))
  ])
  t.same(documentsFetched(openid)[0], ['/.well-known/openid-configuration', 200])
  t.same(documentsFetched(oauth).at(-1), ['/.well-known/oauth-authorization-server', 200])
})

t.test('AUTH_DISCOVERY_URL naming either document in full', async (t) => {
  const [oauth, openid] = await Promise.all([
    discovered(t, { issuerPath: '/tenant-a' }, (op) => ({ AUTH_ISSUER_URL: op.issuer, AUTH_DISCOVERY_URL: `${op.origin}/.well-known/oauth-authorization-server/tenant-a` })),
    discovered(t, { issuerPath: '/tenant-a' }, (op) => ({ AUTH_ISSUER_URL: op.issuer, AUTH_DISCOVERY_URL: `${op.issuer}/.well-known/openid-configuration` }))
  ])
  t.same(documentsFetched(oauth), [['/.well-known/oauth-authorization-server/tenant-a', 200]], 'that document, and only it')
  t.same(documentsFetched(openid), [['/tenant-a/.well-known/openid-configuration', 200]])
})

t.test('the server publishes what it supports: a client authentication method it does not list is warned about, naming AUTH_CLIENT_AUTH', async (t) => {
  // the server offers client_secret_basic and private_key_jwt only; the client is registered with basic
  const op = await startProvider(t, { clients, configuration: { clientAuthMethods: ['client_secret_basic', 'private_key_jwt'] } })
  const api = await tokenCheckingApi(t, op)
  const s = await startSidecar(t, op, api.url, { ...ENV, AUTH_CLIENT_AUTH: 'client_secret_post', AUTH_ISSUER_URL: op.issuer }, false)
  const lines = (): string[] => [...s.run.stdout, ...s.run.stderr.join('').split('\n')]
  const named = (l: string): boolean => /AUTH_CLIENT_AUTH/.test(l) && /client_secret_post/.test(l)
  await until(() => lines().some(named), 30_000).catch(() => {})
  const warning = lines().find(named)
  t.ok(warning, `a line names AUTH_CLIENT_AUTH: ${lines().join('\n')}`)
  t.match(warning, /client_secret_basic/, 'and what the server offers')
})

function escaped (text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')
}

for (const [which, options, configured] of [
  ['a trailing slash the issuer does not have', { issuerPath: '/tenant-a' }, (op: RunningProvider) => `${op.issuer}/`],
  ['no trailing slash where the issuer has one', { issuerPath: '/tenant-a', trailingSlash: true }, (op: RunningProvider) => op.issuer.replace(/\/$/, '')],
  // an issuer that is an origin is a string too: Auth0's ends in a slash, oidc-provider's need not
  ['a bare origin and a trailing slash the issuer does not have', {}, (op: RunningProvider) => `${op.issuer}/`],
  ['a bare origin and no trailing slash where the issuer has one (as Auth0\'s)', { trailingSlash: true }, (op: RunningProvider) => op.issuer.replace(/\/$/, '')]
] as const) {
  t.test(`issuers compare exactly: AUTH_ISSUER_URL with ${which} is refused, both values shown`, async (t) => {
    const op = await startProvider(t, { clients, ...options })
    const api = await tokenCheckingApi(t, op)
    const issuer = configured(op)
    const run = start(sidecarEnv(op, api.url, { ...ENV, AUTH_ISSUER_URL: issuer, PROXY_PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1' }))
    t.teardown(() => { run.child.kill('SIGKILL') })
    const output = (): string => run.stdout.join('\n') + run.stderr.join('')
    // both values, each whole
    const both = (text: string): boolean => new RegExp(`${escaped(op.issuer)}(?![\\w/])`).test(text) && new RegExp(`${escaped(issuer)}(?![\\w/])`).test(text) && /issuer/.test(text)
    await until(() => output().split('\n').some(both) || output().includes('"token obtained'), 30_000).catch(() => {})
    t.notOk(output().includes('"token obtained'), 'no token from a server that is not the issuer configured')
    t.ok(output().split('\n').some(both), `one line names the issuer configured and the one the document names: ${output()}`)
    t.same(op.tokenRequests(), [], 'the token endpoint is never called')
  })
}
