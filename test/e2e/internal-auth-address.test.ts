import t from 'tap'
import { build, get, until } from '../helpers/build.js'

// The topology of most clusters: the sidecar reaches the auth server by an
// internal address (a Service) while the server's hostname, and so the
// issuer of everything it issues, is the public one.
const PUBLIC = 'https://sso.example.test'

t.test('a token URL at an internal address with scope openid: the ID token, issued by the public hostname, does not make the answer unusable', async (t) => {
  const d = await build(t, { AUTH_URL: '', AUTH_TOKEN_URL: '{tokenUrl}', AUTH_SCOPE: 'openid' }, { publicUrl: PUBLIC })
  await until(() => d.app.credential.ready(), 5_000).catch(() => {})
  t.ok(d.app.credential.ready(), `ready (${d.app.credential.notReadyReason() ?? ''})`)
  t.ok(d.tokenServer.grants.every((g) => g.form.scope === 'openid'), 'the ID token was asked for')
  const answer = await get(`${d.proxyUrl}/_verify`)
  t.equal(answer.status, 200, 'the access token is used')
  t.equal(d.tokenServer.grants.filter((g) => g.status === 200).length, 1, 'one grant, not a retry loop')
  t.notOk(d.log.records().some((r) => /issuer/.test(String(r.reason ?? ''))), 'no grant failed on the issuer')
})

t.test('discovery from an internal address: the document names the public issuer, the endpoints under it are reached internally, the session ended there', async (t) => {
  const d = await build(t, {
    AUTH_URL: '',
    AUTH_SCOPE: 'openid',
    AUTH_ISSUER_URL: `${PUBLIC}/auth/realms/service-realm`,
    // `{issuer}` is the token server's address joined with the realm's path: here, the internal one
    AUTH_DISCOVERY_URL: '{internal}'
  }, { publicUrl: PUBLIC })
  await until(() => d.app.credential.ready())
  t.equal(d.tokenServer.discoveries, 1)
  const discovered = d.log.records().find((r) => r.msg === 'discovered the realm\'s endpoints')!
  t.equal(discovered.issuer, `${PUBLIC}/auth/realms/service-realm`, 'the public issuer, as the document names it')
  t.equal(discovered.tokenUrl, d.tokenServer.url + d.tokenServer.tokenPath, 'the token endpoint at the internal address')
  t.equal(discovered.endSessionUrl, `${d.tokenServer.url}/auth/realms/service-realm/protocol/openid-connect/logout`, 'the end-session endpoint too')
  t.equal((await get(`${d.proxyUrl}/_verify`)).status, 200)
  await d.app.close(0)
  t.equal(d.tokenServer.logouts.length, 1, 'the session was ended at the internal address')
})

t.test('discovery from an internal address given as the document\'s whole URL', async (t) => {
  const d = await build(t, {
    AUTH_URL: '',
    AUTH_ISSUER_URL: `${PUBLIC}/auth/realms/service-realm`,
    AUTH_DISCOVERY_URL: '{internal}/.well-known/openid-configuration',
    AUTH_GRANT_TYPE: 'client_credentials',
    AUTH_USERNAME: '',
    AUTH_PASSWORD: ''
  }, { publicUrl: PUBLIC })
  await until(() => d.app.credential.ready())
  t.equal((await get(`${d.proxyUrl}/_verify`)).status, 200)
  t.equal(d.tokenServer.grants.at(-1)?.grantType, 'client_credentials')
})
