import t from 'tap'
import { checkDiscovery } from '../../src/token/discovery.js'
import { ClientAuthenticator } from '../../src/token/client-auth.js'
import { buildRequest, clientCredentialsGrant, endSessionFields, GrantError, passwordGrant, refreshGrant, revocationFields } from '../../src/token/grant.js'
import { keycloakEndpointUrl } from '../../src/token/session.js'

const post = new ClientAuthenticator({ clientId: 'legacy-app', clientAuth: 'client_secret_post' })
const creds = { clientSecret: 's3cret' }
const extras = { scope: 'openid', params: [['audience', 'api'], ['resource', 'https://a']] as Array<[string, string]> }

const fields = (form: string): Array<[string, string]> => [...new URLSearchParams(form)]

t.test('grant forms: the sidecar\'s fields, then AUTH_TOKEN_PARAMS; client_secret_post puts the client in the form', async (t) => {
  const client = await post.prove(creds, 'https://kc/token')
  t.same(fields(buildRequest(client, passwordGrant('svc', 'pw'), extras).form), [
    ['grant_type', 'password'], ['username', 'svc'], ['password', 'pw'], ['client_id', 'legacy-app'], ['client_secret', 's3cret'],
    ['scope', 'openid'], ['audience', 'api'], ['resource', 'https://a']
  ])
  t.same(fields(buildRequest(client, clientCredentialsGrant(), extras).form), [
    ['grant_type', 'client_credentials'], ['client_id', 'legacy-app'], ['client_secret', 's3cret'], ['scope', 'openid'], ['audience', 'api'], ['resource', 'https://a']
  ])
  t.same(fields(buildRequest(client, refreshGrant('r1'), extras).form).slice(0, 2), [['grant_type', 'refresh_token'], ['refresh_token', 'r1']])
  t.equal(buildRequest(client, passwordGrant('svc', 'pw'), extras).authorization, undefined)
})

t.test('client_secret_basic: RFC 6749 2.3.1, each part form-urlencoded before Base64, nothing of the client in the form', async (t) => {
  const basic = new ClientAuthenticator({ clientId: 'my app:1', clientAuth: 'client_secret_basic' })
  const req = buildRequest(await basic.prove({ clientSecret: 'a:b+c%/ é' }, 'https://kc/token'), clientCredentialsGrant())
  t.same(fields(req.form), [['grant_type', 'client_credentials']])
  const decoded = Buffer.from(req.authorization!.slice('Basic '.length), 'base64').toString('utf8')
  t.equal(decoded, 'my+app%3A1:a%3Ab%2Bc%25%2F+%C3%A9', 'the colon separating them is the only raw one')
})

t.test('end-session and revocation requests carry the client and the token, not the grant extras', async (t) => {
  const client = await post.prove(creds, 'https://kc/token')
  t.same(fields(buildRequest(client, endSessionFields('r1')).form), [['refresh_token', 'r1'], ['client_id', 'legacy-app'], ['client_secret', 's3cret']])
  t.same(fields(buildRequest(client, revocationFields('a1', 'access_token')).form), [['token', 'a1'], ['token_type_hint', 'access_token'], ['client_id', 'legacy-app'], ['client_secret', 's3cret']])
})

t.test('Keycloak\'s end-session and revocation endpoints are the token URL with token replaced by logout or revoke', async (t) => {
  t.equal(keycloakEndpointUrl('https://kc/realms/r/protocol/openid-connect/token', 'logout'), 'https://kc/realms/r/protocol/openid-connect/logout')
  t.equal(keycloakEndpointUrl('https://kc/realms/r/protocol/openid-connect/token', 'revoke'), 'https://kc/realms/r/protocol/openid-connect/revoke')
  t.equal(keycloakEndpointUrl('https://kc/oauth2/v1/tokens', 'logout'), undefined)
  t.equal(keycloakEndpointUrl(undefined, 'logout'), undefined)
})

t.test('discovery: the issuer must match; an https issuer\'s endpoints must be https', async (t) => {
  const issuer = 'https://kc.example/realms/r'
  const doc = (extra: object) => ({ status: 200, body: JSON.stringify({ issuer, token_endpoint: `${issuer}/protocol/openid-connect/token`, ...extra }) })
  t.same(checkDiscovery(issuer, doc({ end_session_endpoint: `${issuer}/logout` }), true), { tokenUrl: `${issuer}/protocol/openid-connect/token`, endSessionUrl: `${issuer}/logout` })
  t.same(checkDiscovery(`${issuer}/`, doc({}), true).tokenUrl, `${issuer}/protocol/openid-connect/token`, 'a trailing slash in AUTH_ISSUER_URL is allowed')
  const fails = (res: { status: number, body: string }, kind: string, message: RegExp, required = true): void => {
    try {
      checkDiscovery(issuer, res, required)
      t.fail('accepted')
    } catch (err) {
      t.ok(err instanceof GrantError)
      t.equal((err as GrantError).kind, kind)
      t.match((err as Error).message, message)
    }
  }
  fails(doc({ issuer: 'https://kc.example/realms/other' }), 'wrong_url', /names the issuer "https:\/\/kc\.example\/realms\/other", not https:\/\/kc\.example\/realms\/r/)
  fails(doc({ token_endpoint: 'http://kc.example/token' }), 'wrong_url', /token_endpoint .* is not an https URL/)
  fails(doc({ end_session_endpoint: 'javascript:alert(1)' }), 'wrong_url', /end_session_endpoint .* is not an https URL/)
  fails(doc({ token_endpoint: undefined }), 'wrong_url', /names no token_endpoint/)
  t.same(checkDiscovery(issuer, doc({ token_endpoint: undefined }), false), {}, 'with AUTH_TOKEN_URL the token endpoint may be absent')
  fails({ status: 503, body: '' }, 'transient', /answered 503/)
  fails({ status: 404, body: '' }, 'wrong_url', /not an OpenID Connect issuer/)
  fails({ status: 200, body: '<html>' }, 'wrong_url', /not JSON/)
})
