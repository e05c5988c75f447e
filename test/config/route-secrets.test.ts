import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { ConfigError } from '../../src/errors.js'

const base = {
  BASE_URL: 'http://api.internal',
  AUTH_URL: 'https://sso.internal',
  AUTH_CLIENT_ID: 'legacy-app',
  AUTH_CLIENT_SECRET: 'default-client-secret-1',
  AUTH_USERNAME: 'svc',
  AUTH_PASSWORD: 'default-password-2',
  ROUTE_OTHER_BASE_URL: 'http://other.internal',
  ROUTE_OTHER_PATH: '/other'
}

function problems (env: Record<string, string>): readonly string[] {
  try {
    loadConfig({ ...base, ...env }, { cwd: '/nonexistent' })
  } catch (err) {
    if (err instanceof ConfigError) return err.problems
    throw err
  }
  return []
}

t.test('a route that names its own auth server is refused while it would send it the default route\'s password and client secret', async (t) => {
  const said = problems({ ROUTE_OTHER_AUTH_TOKEN_URL: 'https://elsewhere.example/token' })
  t.same(said, ['route other: ROUTE_OTHER_AUTH_TOKEN_URL names another auth server than the default route\'s, which would be sent the default route\'s AUTH_PASSWORD, AUTH_CLIENT_SECRET; set the route\'s own (ROUTE_OTHER_AUTH_PASSWORD, ROUTE_OTHER_AUTH_CLIENT_SECRET, or their _FILE)'])
  t.notMatch(said.join('\n'), /default-password-2|default-client-secret-1/, 'no secret value in the message')
  for (const setting of ['AUTH_URL', 'AUTH_ISSUER_URL', 'AUTH_REALM']) {
    t.match(problems({ [`ROUTE_OTHER_${setting}`]: setting === 'AUTH_REALM' ? 'other-realm' : 'https://elsewhere.example/realms/x' }).join('\n'), `ROUTE_OTHER_${setting} names another auth server`, `${setting} too`)
  }
  t.same(problems({ ROUTE_OTHER_AUTH_TOKEN_URL: 'https://elsewhere.example/token', ROUTE_OTHER_AUTH_GRANT_TYPE: 'client_credentials', ROUTE_OTHER_AUTH_USERNAME: '', ROUTE_OTHER_AUTH_PASSWORD: '' }).join('\n').match(/AUTH_CLIENT_SECRET;/)?.length, 1, 'only what the route would send: client_credentials sends no password')
})

t.test('controls: a route with its own server and its own secrets, or the default\'s server, is accepted', async (t) => {
  t.same(problems({ ROUTE_OTHER_AUTH_TOKEN_URL: 'https://elsewhere.example/token', ROUTE_OTHER_AUTH_PASSWORD: 'p2', ROUTE_OTHER_AUTH_CLIENT_SECRET: 's2' }), [], 'its own secrets')
  t.same(problems({ ROUTE_OTHER_AUTH_URL: 'https://sso.internal' }), [], 'the default route\'s own server, named again')
  t.same(problems({ ROUTE_OTHER_AUTH_CLIENT_ID: 'other-app' }), [], 'another client on the same server')
  t.same(problems({ ROUTE_OTHER_AUTH_TOKEN_URL: 'https://elsewhere.example/token', ROUTE_OTHER_AUTH_CLIENT_AUTH: 'private_key_jwt', ROUTE_OTHER_AUTH_CLIENT_KEY_FILE: '/nonexistent/key.pem', ROUTE_OTHER_AUTH_GRANT_TYPE: 'client_credentials' }).filter((p) => p.includes('another auth server')), [], 'a signed assertion sends no secret')
})

t.test('a route in basic mode on another origin is refused while it would send the default route\'s user name and password there', async (t) => {
  const said = problems({ ROUTE_OTHER_AUTH_MODE: 'basic' })
  t.match(said.join('\n'), 'route other: basic mode would send the default route\'s user name and password to ROUTE_OTHER_BASE_URL')
  t.notMatch(said.join('\n'), /default-password-2/)
  t.same(problems({ ROUTE_OTHER_AUTH_MODE: 'basic', ROUTE_OTHER_AUTH_USERNAME: 'u2', ROUTE_OTHER_AUTH_PASSWORD: 'p2' }), [], 'its own are accepted')
  t.same(problems({ ROUTE_OTHER_AUTH_MODE: 'basic', ROUTE_OTHER_BASE_URL: 'http://api.internal/other' }), [], 'so is the default route\'s origin')
})

t.test('a route that names its own auth server takes none of the default route\'s token, issuer or discovery URL', async (t) => {
  // where its requests go, and nothing else
  const authOf = (env: Record<string, string>): Record<string, unknown> => {
    const config = loadConfig({ ...base, ROUTE_OTHER_AUTH_PASSWORD: 'p2', ROUTE_OTHER_AUTH_CLIENT_SECRET: 's2', ...env }, { cwd: '/nonexistent' })
    const { tokenUrl, issuerUrl, discoveryUrl } = config.routes.find((r) => r.name === 'other')!.credential.auth as Record<string, unknown>
    return { tokenUrl, issuerUrl, discoveryUrl }
  }
  const defaultTokenUrl = { AUTH_TOKEN_URL: 'https://sso.internal/realms/main/protocol/openid-connect/token', AUTH_REALM: 'main' }
  t.equal(authOf({ ...defaultTokenUrl, ROUTE_OTHER_AUTH_URL: 'https://elsewhere.example' }).tokenUrl, 'https://elsewhere.example/auth/realms/main/protocol/openid-connect/token', 'its AUTH_URL, with the default\'s realm, over the default\'s AUTH_TOKEN_URL')
  t.equal(authOf({ ...defaultTokenUrl, ROUTE_OTHER_AUTH_REALM: 'other' }).tokenUrl, 'https://sso.internal/auth/realms/other/protocol/openid-connect/token', 'its realm on the default\'s AUTH_URL')
  const issuer = { AUTH_URL: '', AUTH_ISSUER_URL: 'https://sso.internal/realms/main', AUTH_DISCOVERY_URL: 'http://keycloak.internal:8080/realms/main/.well-known/openid-configuration' }
  t.same(authOf({ ...issuer, ROUTE_OTHER_AUTH_TOKEN_URL: 'https://elsewhere.example/token' }), { tokenUrl: 'https://elsewhere.example/token', issuerUrl: undefined, discoveryUrl: undefined }, 'its token URL, with no discovery of the default\'s issuer')
  t.same(authOf({ ...issuer, ROUTE_OTHER_AUTH_ISSUER_URL: 'https://elsewhere.example/realms/x' }), { tokenUrl: undefined, issuerUrl: 'https://elsewhere.example/realms/x', discoveryUrl: 'https://elsewhere.example/realms/x/.well-known/openid-configuration' }, 'its issuer, with its own document, not the default\'s')
  t.match(problems({ ...issuer, ROUTE_OTHER_AUTH_REALM: 'other', ROUTE_OTHER_AUTH_PASSWORD: 'p2', ROUTE_OTHER_AUTH_CLIENT_SECRET: 's2' }), ['route other: AUTH_URL is required in oauth2 mode (or set ROUTE_OTHER_AUTH_ISSUER_URL or ROUTE_OTHER_AUTH_TOKEN_URL)'], 'a realm of its own with no AUTH_URL to go with it is a problem, not the default\'s issuer')
})

t.test('controls: a route that sets its server to the default route\'s own values, or only a discovery URL, takes the rest from the default route', async (t) => {
  const routeOf = (env: Record<string, string>) => loadConfig({ ...base, ...env }, { cwd: '/nonexistent' }).routes
  const withTokenUrl = { AUTH_TOKEN_URL: 'https://sso.internal/token' }
  const [first, other] = routeOf({ ...withTokenUrl, ROUTE_OTHER_AUTH_URL: 'https://sso.internal' })
  t.equal(other!.credential, first!.credential, 'the default\'s AUTH_URL said again: the default route\'s credential, token URL and secrets')
  const issuer = { AUTH_URL: '', AUTH_ISSUER_URL: 'https://sso.internal/realms/main' }
  const auth = routeOf({ ...issuer, ROUTE_OTHER_AUTH_DISCOVERY_URL: 'http://keycloak.internal:8080/realms/main/.well-known/openid-configuration', ROUTE_OTHER_AUTH_PASSWORD: 'p2', ROUTE_OTHER_AUTH_CLIENT_SECRET: 's2' })[1]!.credential.auth
  t.match(auth, { issuerUrl: 'https://sso.internal/realms/main', discoveryUrl: 'http://keycloak.internal:8080/realms/main/.well-known/openid-configuration' }, 'the default\'s issuer, its document found at the route\'s address')
})
