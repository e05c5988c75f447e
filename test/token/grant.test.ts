import t from 'tap'
import { SecretScrubber } from '../../src/secrets.js'
import { ClientAuthenticator } from '../../src/token/client-auth.js'
import { systemClock } from '../../src/token/clock.js'
import { checkDiscovery } from '../../src/token/discovery.js'
import { answerOf, GrantError, type GrantExtras } from '../../src/token/grant.js'
import { OAuthClient } from '../../src/token/oauth-client.js'
import { keycloakEndpointUrl } from '../../src/token/session.js'
import { NO_GRANT_SPAN } from '../../src/tracing/tracing.js'
import { captureLogger } from '../helpers/log.js'
import { ScriptedEndpoint, tokenAnswer } from '../helpers/scripted-endpoint.js'

const TOKEN_URL = 'https://kc/realms/r/protocol/openid-connect/token'
const extras: GrantExtras = { scope: 'openid', params: [['audience', 'api'], ['resource', 'https://a']] }

/** An OAuth client against a scripted token endpoint, and the forms it sent in order. */
function client (options: { clientAuth?: 'client_secret_post' | 'client_secret_basic', clientId?: string, secret?: string, grantType?: 'password' | 'client_credentials' } = {}) {
  const endpoint = new ScriptedEndpoint()
  const clientId = options.clientId ?? 'legacy-app'
  const server = new OAuthClient({
    tokenUrl: TOKEN_URL,
    grantType: options.grantType ?? 'password',
    clientId,
    client: new ClientAuthenticator({ clientId, clientAuth: options.clientAuth ?? 'client_secret_post', onSecret: () => {} }),
    extras,
    credentials: { read: async () => ({ username: 'svc', password: 'pw', clientSecret: options.secret ?? 's3cret' }) },
    fetch: endpoint.fetch,
    timeoutMs: 1_000,
    clock: systemClock,
    log: captureLogger().logger,
    secrets: new SecretScrubber()
  })
  const fields = (n: number): Array<[string, string]> => [...new URLSearchParams(new URLSearchParams(endpoint.calls[n]!.form))]
  return { endpoint, server, fields }
}

t.test('grant forms: the grant type, its fields, then the scope and AUTH_TOKEN_PARAMS; client_secret_post puts the client in the form', async (t) => {
  const { server, fields, endpoint } = client()
  await server.primaryGrant(NO_GRANT_SPAN)
  t.same(fields(0), [
    ['grant_type', 'password'], ['username', 'svc'], ['password', 'pw'], ['scope', 'openid'], ['audience', 'api'], ['resource', 'https://a'],
    ['client_id', 'legacy-app'], ['client_secret', 's3cret']
  ])
  await server.refreshGrant('r1', NO_GRANT_SPAN)
  t.same(fields(1).slice(0, 2), [['grant_type', 'refresh_token'], ['refresh_token', 'r1']])
  t.equal(endpoint.calls[0]!.headers.authorization, undefined)
  const cc = client({ grantType: 'client_credentials' })
  await cc.server.primaryGrant(NO_GRANT_SPAN)
  t.same(cc.fields(0), [['grant_type', 'client_credentials'], ['scope', 'openid'], ['audience', 'api'], ['resource', 'https://a'], ['client_id', 'legacy-app'], ['client_secret', 's3cret']])
})

t.test('client_secret_basic: RFC 6749 2.3.1, each part form-urlencoded before Base64, nothing of the client in the form', async (t) => {
  const { server, fields, endpoint } = client({ clientAuth: 'client_secret_basic', clientId: 'my app:1', secret: 'a:b+c%/ é', grantType: 'client_credentials' })
  await server.primaryGrant(NO_GRANT_SPAN)
  t.notOk(fields(0).some(([n]) => n === 'client_id' || n === 'client_secret'))
  const decoded = Buffer.from(endpoint.calls[0]!.headers.authorization!.slice('Basic '.length), 'base64').toString('utf8')
  t.equal(decoded, 'my+app%3A1:a%3Ab%2Bc%25%2F+%C3%A9', 'the colon separating them is the only raw one')
})

t.test('end-session and revocation requests carry the client and the token, not the grant extras', async (t) => {
  const { server, endpoint } = client()
  endpoint.queue.push({ status: 204, body: '' }, { status: 200, body: '' })
  await server.endSession('https://kc/realms/r/protocol/openid-connect/logout', 'r1', 1_000)
  await server.revoke('https://kc/realms/r/protocol/openid-connect/revoke', 'a1', 'access_token', 1_000)
  t.same(endpoint.calls[0]!.form, { refresh_token: 'r1', client_id: 'legacy-app', client_secret: 's3cret' })
  t.same(endpoint.calls[1]!.form, { token: 'a1', token_type_hint: 'access_token', client_id: 'legacy-app', client_secret: 's3cret' })
})

t.test('a token answer is checked field by field; a token_type of DPoP is not used as a bearer token', async (t) => {
  const { server, endpoint } = client()
  endpoint.queue.push(tokenAnswer())
  t.equal((await server.primaryGrant(NO_GRANT_SPAN)).tokenType, 'Bearer')
  endpoint.queue.push({ status: 200, body: JSON.stringify({ access_token: 'abc', token_type: 'DPoP', expires_in: 300 }) })
  const err = await server.primaryGrant(NO_GRANT_SPAN).catch((e: unknown) => e) as GrantError
  t.equal(err.kind, 'unusable')
  t.match(err.message, /a DPoP-bound token, which only works with its proof: set AUTH_DPOP=true/)
})

t.test('Keycloak\'s end-session and revocation endpoints are the token URL with token replaced by logout or revoke', async (t) => {
  t.equal(keycloakEndpointUrl('https://kc/realms/r/protocol/openid-connect/token', 'logout'), 'https://kc/realms/r/protocol/openid-connect/logout')
  t.equal(keycloakEndpointUrl('https://kc/realms/r/protocol/openid-connect/token', 'revoke'), 'https://kc/realms/r/protocol/openid-connect/revoke')
  t.equal(keycloakEndpointUrl('https://kc/oauth2/v1/tokens', 'logout'), undefined)
  t.equal(keycloakEndpointUrl(undefined, 'logout'), undefined)
})

/** Discovery's check of one answer. */
async function discovered (issuer: string, answer: { status: number, body: string }, configuredTokenUrl?: string, url = `${issuer.replace(/\/$/, '')}/.well-known/openid-configuration`): Promise<Awaited<ReturnType<typeof checkDiscovery>>> {
  const res = new Response(answer.status === 204 ? null : answer.body, { status: answer.status, headers: { 'content-type': 'application/json' } })
  return await checkDiscovery({ issuer, url }, await answerOf(res), res, configuredTokenUrl, (text, max) => text.slice(0, max))
}

t.test('discovery: the issuer must match; an https issuer\'s endpoints must be https; the session\'s end stays on its origins', async (t) => {
  const issuer = 'https://kc.example/realms/r'
  const doc = (extra: object) => ({ status: 200, body: JSON.stringify({ issuer, token_endpoint: `${issuer}/protocol/openid-connect/token`, ...extra }) })
  t.match(await discovered(issuer, doc({ end_session_endpoint: `${issuer}/logout` })), { tokenUrl: `${issuer}/protocol/openid-connect/token`, endSessionUrl: `${issuer}/logout`, ignored: [] })
  const slashed = await discovered(`${issuer}/`, doc({})).catch((e: unknown) => e as GrantError)
  t.match(slashed, { kind: 'wrong_url', message: `discovery: the document at ${issuer}/.well-known/openid-configuration names the issuer "${issuer}", not ${issuer}/ (they differ in a trailing slash, and issuers compare exactly): set AUTH_ISSUER_URL to the issuer exactly as the server names it` }, 'issuers compare exactly: a trailing slash makes another issuer, both shown')
  const fails = async (res: { status: number, body: string }, kind: string, message: RegExp, configuredTokenUrl?: string): Promise<void> => {
    try {
      await discovered(issuer, res, configuredTokenUrl)
      t.fail('accepted')
    } catch (err) {
      t.ok(err instanceof GrantError)
      t.equal((err as GrantError).kind, kind)
      t.match((err as Error).message, message)
    }
  }
  await fails(doc({ issuer: 'https://kc.example/realms/other' }), 'wrong_url', /names the issuer "https:\/\/kc\.example\/realms\/other", not https:\/\/kc\.example\/realms\/r/)
  await fails(doc({ token_endpoint: 'http://kc.example/token' }), 'wrong_url', /token_endpoint .* is not an https URL/)
  await fails(doc({ end_session_endpoint: 'javascript:alert(1)' }), 'wrong_url', /end_session_endpoint .* is not an https URL/)
  await fails(doc({ token_endpoint: undefined }), 'wrong_url', /names no token_endpoint/)
  t.match(await discovered(issuer, doc({ token_endpoint: undefined }), `${issuer}/token`), { issuer }, 'with AUTH_TOKEN_URL the token endpoint may be absent')
  await fails({ status: 503, body: '' }, 'transient', /answered 503/)
  await fails({ status: 404, body: '' }, 'wrong_url', /not an OpenID Connect issuer/)
  await fails({ status: 200, body: '<html>' }, 'wrong_url', /not JSON/)

  const elsewhere = await discovered(issuer, doc({ end_session_endpoint: 'https://collector.example/logout', revocation_endpoint: 'https://collector.example/revoke' }))
  t.equal(elsewhere.endSessionUrl, undefined, 'an end-session endpoint on another origin is not used')
  t.equal(elsewhere.revocationUrl, undefined, 'nor a revocation endpoint')
  t.match(elsewhere.ignored, [/end_session_endpoint https:\/\/collector\.example\/logout is on another origin/, /revocation_endpoint https:\/\/collector\.example\/revoke is on another origin/])
  const tokenOrigin = await discovered(issuer, doc({ token_endpoint: 'https://tokens.example/token', revocation_endpoint: 'https://tokens.example/revoke' }))
  t.equal(tokenOrigin.revocationUrl, 'https://tokens.example/revoke', 'the token endpoint\'s origin is trusted too')
})

t.test('discovery from an internal address: the public issuer is checked, and the endpoints under it are reached at the internal address', async (t) => {
  const issuer = 'https://sso.example.com/realms/r'
  const internal = 'http://keycloak.auth:8080/realms/r/.well-known/openid-configuration'
  const doc = (extra: object) => ({ status: 200, body: JSON.stringify({ issuer, token_endpoint: `${issuer}/protocol/openid-connect/token`, end_session_endpoint: `${issuer}/protocol/openid-connect/logout`, ...extra }) })
  t.match(await discovered(issuer, doc({}), undefined, internal), {
    issuer,
    tokenUrl: 'http://keycloak.auth:8080/realms/r/protocol/openid-connect/token',
    endSessionUrl: 'http://keycloak.auth:8080/realms/r/protocol/openid-connect/logout'
  }, 'Keycloak without a dynamic backchannel lists every endpoint at its public hostname')
  t.match(await discovered(issuer, doc({ token_endpoint: 'http://10.0.0.7:8080/realms/r/protocol/openid-connect/token' }), undefined, internal), {
    tokenUrl: 'http://10.0.0.7:8080/realms/r/protocol/openid-connect/token'
  }, 'an endpoint not under the issuer (Keycloak\'s dynamic backchannel) is used as listed')
  const wrong = await discovered('http://keycloak.auth:8080/realms/r', doc({})).catch((e: unknown) => e as Error)
  t.match((wrong as Error).message, /names the issuer "https:\/\/sso\.example\.com\/realms\/r", not http:\/\/keycloak\.auth:8080\/realms\/r: set AUTH_ISSUER_URL to the issuer exactly as the server names it \(and, should the sidecar reach it by another address, AUTH_DISCOVERY_URL=http:\/\/keycloak\.auth:8080\/realms\/r\)/, 'the internal address given as the issuer: the message names both settings')
  const https = 'https://keycloak.auth:8443/realms/r/.well-known/openid-configuration'
  const plain = await discovered(issuer, doc({ token_endpoint: 'http://elsewhere.example/token' }), undefined, https).catch((e: unknown) => e as Error)
  t.match((plain as Error).message, /token_endpoint .* is not an https URL/, 'a document fetched over https sends no credential over http')
})
