import { execFileSync } from 'node:child_process'
import { rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { ConfigError } from '../../src/errors.js'
import { CredentialStore } from '../../src/config/credentials.js'
import { MAX_SECRET_FILE_BYTES } from '../../src/config/secret-file.js'

const minimal = {
  BASE_URL: 'https://api.internal/v2/',
  AUTH_URL: 'https://sso.internal',
  AUTH_CLIENT_ID: 'legacy-app',
  AUTH_USERNAME: 'svc',
  AUTH_PASSWORD: 'pw-secret-123'
}

function problems (env: NodeJS.ProcessEnv, cwd = '/nonexistent'): readonly string[] {
  try {
    loadConfig(env, { cwd })
  } catch (err) {
    if (err instanceof ConfigError) return err.problems
    throw err
  }
  return []
}

t.test('defaults and derived values', async (t) => {
  const c = loadConfig(minimal, { cwd: '/nonexistent' })
  t.same({ origin: c.routes[0]!.origin, basePath: c.routes[0]!.basePath, ...c.upstream }, { origin: 'https://api.internal', basePath: '/v2', timeoutMs: 30000, idleTimeoutMs: 300000, connections: 128, keepAliveMs: 4000 })
  t.same(c.routes[0]!.credential.auth, {
    mode: 'oauth2',
    tokenUrl: 'https://sso.internal/auth/realms/service-realm/protocol/openid-connect/token',
    alternateTokenUrl: 'https://sso.internal/realms/service-realm/protocol/openid-connect/token',
    grantType: 'password',
    clientAuth: 'client_secret_post',
    clientId: 'legacy-app',
    params: [],
    logoutOnShutdown: true
  })
  t.equal(c.accessLog, true)
  t.same(c.warnings, [])
  t.same(c.proxy, { host: '127.0.0.1', port: 8080, maxRequests: 1024, websocketMaxMessageBytes: 1_048_576 })
  t.same(c.admin, { host: '0.0.0.0', port: 9090 })
  t.equal(c.logLevel, 'info')
  t.same(c.token, { timeoutMs: 10000, waitMs: 5000, retryMinMs: 1000, retryMaxMs: 30000, rejectedRetryMs: 60000 })
  t.equal(c.shutdownGraceMs, 10000)
})

t.test('AUTH_TOKEN_URL overrides the derived URL (Keycloak 17+ without /auth)', async (t) => {
  const c = loadConfig({ ...minimal, AUTH_URL: undefined, AUTH_TOKEN_URL: 'https://kc/realms/r/protocol/openid-connect/token' }, { cwd: '/x' })
  t.equal(c.routes[0]!.credential.auth.mode === 'oauth2' && c.routes[0]!.credential.auth.tokenUrl, 'https://kc/realms/r/protocol/openid-connect/token')
  const realm = loadConfig({ ...minimal, AUTH_REALM: 'other' }, { cwd: '/x' })
  t.match(realm.routes[0]!.credential.auth, { tokenUrl: 'https://sso.internal/auth/realms/other/protocol/openid-connect/token' })
})

t.test('every problem is reported at once, naming each variable, echoing no value', async (t) => {
  const got = problems({
    PROXY_PORT: '70000',
    ADMIN_PORT: 'abc',
    AUTH_MODE: 'kerberos',
    LOG_LEVEL: 'loud',
    AUTH_PASSWORD: 'hunter2-do-not-echo',
    UPSTREAM_TIMEOUT_MS: '-1'
  })
  t.same(got, [
    'AUTH_MODE must be one of oauth2, basic',
    'PROXY_PORT must be at most 65535',
    'ADMIN_PORT must be a whole number',
    'LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent',
    'UPSTREAM_TIMEOUT_MS must be at least 1',
    'BASE_URL is required',
    'AUTH_USERNAME (or AUTH_USERNAME_FILE) is required',
    'AUTH_URL is required in oauth2 mode (or set AUTH_ISSUER_URL or AUTH_TOKEN_URL)',
    'AUTH_CLIENT_ID is required in oauth2 mode'
  ])
  const missing = problems({ AUTH_PASSWORD: 'hunter2-do-not-echo' })
  t.same(missing, [
    'BASE_URL is required',
    'AUTH_USERNAME (or AUTH_USERNAME_FILE) is required',
    'AUTH_URL is required in oauth2 mode (or set AUTH_ISSUER_URL or AUTH_TOKEN_URL)',
    'AUTH_CLIENT_ID is required in oauth2 mode'
  ])
  t.notMatch(JSON.stringify(got) + JSON.stringify(missing), 'hunter2')
})

t.test('bad URLs are named without echoing them', async (t) => {
  const got = problems({ ...minimal, BASE_URL: 'ftp://user:pw@host/', AUTH_URL: 'not a url' })
  t.same(got, ['BASE_URL must be an absolute http or https URL', 'AUTH_URL must be an absolute http or https URL'])
  t.same(problems({ ...minimal, BASE_URL: 'https://user:pw@host/' }), ['BASE_URL must not carry credentials'])
  t.same(problems({ ...minimal, BASE_URL: 'https://host/?a=1' }), ['BASE_URL must not have a query or fragment'])
})

t.test('basic mode needs no token endpoint', async (t) => {
  const c = loadConfig({ BASE_URL: 'http://u', AUTH_MODE: 'basic', AUTH_USERNAME: 'a', AUTH_PASSWORD: 'b' }, { cwd: '/x' })
  t.same(c.routes[0]!.credential.auth, { mode: 'basic' })
})

t.test('an empty variable counts as unset', async (t) => {
  const c = loadConfig({ ...minimal, AUTH_CLIENT_SECRET: '', LOG_LEVEL: '' }, { cwd: '/x' })
  t.equal(c.routes[0]!.credential.sources.clientSecret, undefined)
  t.equal(c.logLevel, 'info')
})

t.test('.env is read and the environment wins over it', async (t) => {
  const dir = t.testdir({ '.env': 'BASE_URL=http://from-dotenv/\nLOG_LEVEL=debug\nAUTH_CLIENT_ID=dotenv-client\n' })
  const c = loadConfig({ ...minimal, BASE_URL: undefined, AUTH_CLIENT_ID: 'env-client' }, { cwd: dir })
  t.equal(c.routes[0]!.origin, 'http://from-dotenv')
  t.equal(c.logLevel, 'debug')
  t.equal(c.routes[0]!.credential.auth.mode === 'oauth2' && c.routes[0]!.credential.auth.clientId, 'env-client')
})

t.test('*_FILE variables: read from files, trailing newline ignored, changes picked up', async (t) => {
  const dir = t.testdir({ user: 'svc-from-file\n', pass: 'pw-from-file\r\n', secret: 'cs-from-file' })
  const c = loadConfig({
    ...minimal,
    AUTH_USERNAME: undefined,
    AUTH_PASSWORD: undefined,
    AUTH_USERNAME_FILE: join(dir, 'user'),
    AUTH_PASSWORD_FILE: join(dir, 'pass'),
    AUTH_CLIENT_SECRET_FILE: join(dir, 'secret')
  }, { cwd: dir })
  const warnings: string[] = []
  const store = new CredentialStore(c.routes[0]!.credential.sources, (message) => warnings.push(message))
  t.same(await store.read(), { username: 'svc-from-file', password: 'pw-from-file', clientSecret: 'cs-from-file' })
  writeFileSync(join(dir, 'pass'), 'rotated\n')
  t.equal((await store.read()).password, 'rotated')
  writeFileSync(join(dir, 'pass'), '')
  t.equal((await store.read()).password, 'rotated', 'an emptied file keeps the last good value')
  t.same(warnings, [`AUTH_PASSWORD_FILE (${join(dir, 'pass')}) is empty: keeping its last good value`])

  t.same(problems({ ...minimal, AUTH_PASSWORD: undefined, AUTH_PASSWORD_FILE: join(dir, 'missing') }), ['AUTH_PASSWORD_FILE cannot be read (ENOENT)'])
  t.same(problems({ ...minimal, AUTH_PASSWORD_FILE: join(dir, 'pass') }), ['AUTH_PASSWORD and AUTH_PASSWORD_FILE are both set; use one'])
})

t.test('credential files that are no regular file, or too large, are refused at start, naming the variable; nothing blocks', async (t) => {
  const dir = t.testdir({ big: 'x'.repeat(MAX_SECRET_FILE_BYTES + 1), ok: 'pw' })
  execFileSync('mkfifo', [join(dir, 'fifo')])
  for (const [path, why] of [[join(dir, 'fifo'), 'is not a regular file'], ['/dev/zero', 'is not a regular file'], [dir, 'is not a regular file'], [join(dir, 'big'), 'is larger than 64 KiB']] as const) {
    t.same(problems({ ...minimal, AUTH_PASSWORD: undefined, AUTH_PASSWORD_FILE: path }), [`AUTH_PASSWORD_FILE ${why}`], path)
    t.same(problems({ ...minimal, AUTH_CLIENT_AUTH: 'private_key_jwt', AUTH_CLIENT_KEY_FILE: path }), [`AUTH_CLIENT_KEY_FILE ${why}`], path)
  }
})

t.test('a credential file swapped for a FIFO, a device or a huge file while running: the last good value, a warning naming it, no blocked event loop', async (t) => {
  const dir = t.testdir({ pass: 'good-password' })
  const c = loadConfig({ ...minimal, AUTH_PASSWORD: undefined, AUTH_PASSWORD_FILE: join(dir, 'pass') }, { cwd: dir })
  const warnings: string[] = []
  const store = new CredentialStore(c.routes[0]!.credential.sources, (message) => warnings.push(message))
  t.equal((await store.read()).password, 'good-password')
  let ticks = 0
  const ticking = setInterval(() => { ticks++ }, 5)
  t.teardown(() => clearInterval(ticking))
  rmSync(join(dir, 'pass'))
  execFileSync('mkfifo', [join(dir, 'pass')])
  t.equal((await store.read()).password, 'good-password', 'a FIFO: the last good value')
  rmSync(join(dir, 'pass'))
  symlinkSync('/dev/zero', join(dir, 'pass'))
  t.equal((await store.read()).password, 'good-password', '/dev/zero: the last good value')
  rmSync(join(dir, 'pass'))
  writeFileSync(join(dir, 'pass'), 'y'.repeat(10 * 1024 * 1024))
  t.equal((await store.read()).password, 'good-password', '10 MB: the last good value')
  rmSync(join(dir, 'pass'))
  t.equal((await store.read()).password, 'good-password', 'gone: the last good value')
  await new Promise((resolve) => setTimeout(resolve, 30))
  t.ok(ticks > 0, 'the event loop went on')
  t.same(warnings.map((w) => w.replace(join(dir, 'pass'), 'FILE')), [
    'AUTH_PASSWORD_FILE (FILE) is not a regular file: keeping its last good value',
    'AUTH_PASSWORD_FILE (FILE) is larger than 64 KiB: keeping its last good value',
    'AUTH_PASSWORD_FILE (FILE) cannot be read (ENOENT): keeping its last good value'
  ], 'one warning per problem, naming the variable and the file')
  writeFileSync(join(dir, 'pass'), 'rotated')
  t.equal((await store.read()).password, 'rotated', 'a good file again is used')
})

t.test('egress proxy variables are honoured in either case', async (t) => {
  const c = loadConfig({ ...minimal, https_proxy: 'http://proxy:3128', NO_PROXY: 'localhost' }, { cwd: '/x' })
  t.same(c.egress, { httpsProxy: 'http://proxy:3128', noProxy: 'localhost' })
})

t.test('an empty value in .env means unset, as in the environment', async (t) => {
  const dir = t.testdir({ '.env': 'BASE_URL=http://api/\nAUTH_URL=http://sso\nAUTH_CLIENT_ID=app\nAUTH_USERNAME=u\nAUTH_PASSWORD=p\nAUTH_CLIENT_SECRET=\nAUTH_SCOPE=\nLOG_LEVEL=\nPROXY_PORT=\n' })
  const c = loadConfig({}, { cwd: dir })
  t.equal(c.routes[0]!.credential.sources.clientSecret, undefined)
  t.equal(c.routes[0]!.credential.auth.mode === 'oauth2' && c.routes[0]!.credential.auth.scope, undefined)
  t.equal(c.logLevel, 'info')
  t.equal(c.proxy.port, 8080)
  // an empty environment variable does not hide the value in .env
  t.equal(loadConfig({ LOG_LEVEL: '' }, { cwd: t.testdir({ '.env': 'BASE_URL=http://api/\nAUTH_URL=http://sso\nAUTH_CLIENT_ID=a\nAUTH_USERNAME=u\nAUTH_PASSWORD=p\nLOG_LEVEL=debug\n' }) }).logLevel, 'debug')
})

t.test('misspelt variables with the sidecar\'s prefixes are warned about, with the nearest name', async (t) => {
  const c = loadConfig({ ...minimal, AUTH_SCOPES: 'openid', UPSTREAM_TIMEOUT: '5', AUTH_CLIENTID: 'x', TOKEN_SOMETHING_ELSE_ENTIRELY: '1', HOME: '/root', PATH: '/bin' }, { cwd: '/x' })
  t.same(c.warnings, [
    'AUTH_SCOPES is not a variable of auth-sidecar; did you mean AUTH_SCOPE?',
    'UPSTREAM_TIMEOUT is not a variable of auth-sidecar; did you mean UPSTREAM_TIMEOUT_MS?',
    'AUTH_CLIENTID is not a variable of auth-sidecar; did you mean AUTH_CLIENT_ID?',
    'TOKEN_SOMETHING_ELSE_ENTIRELY is not a variable of auth-sidecar'
  ])
  t.notMatch(JSON.stringify(c.warnings), 'openid', 'no value echoed')
  const k8s = loadConfig({ ...minimal, AUTH_SIDECAR_SERVICE_HOST: '10.0.0.1', AUTH_SIDECAR_SERVICE_PORT: '80', AUTH_SIDECAR_SERVICE_PORT_HTTP: '80', AUTH_SIDECAR_PORT: 'tcp://10.0.0.1:80', AUTH_SIDECAR_PORT_80_TCP_ADDR: '10.0.0.1' }, { cwd: '/x' })
  t.same(k8s.warnings, [], 'Kubernetes service links are not misspellings')
})

t.test('AUTH_URL with /auth or /realms/... is caught at start-up, naming what to change', async (t) => {
  t.same(problems({ ...minimal, AUTH_URL: 'https://sso.internal/auth/' }), [
    'AUTH_URL must not end in /auth: the sidecar adds /auth/realms/... itself, and tries the layout without /auth should that not answer (or set the whole AUTH_TOKEN_URL)'
  ])
  t.same(problems({ ...minimal, AUTH_URL: 'https://sso.internal/realms/service-realm' }), [
    'AUTH_URL must be the server\'s base URL, without /realms/...: the realm goes in AUTH_REALM (or set the whole AUTH_TOKEN_URL)'
  ])
  const given = loadConfig({ ...minimal, AUTH_URL: undefined, AUTH_TOKEN_URL: 'https://kc/realms/r/protocol/openid-connect/token' }, { cwd: '/x' })
  t.equal(given.routes[0]!.credential.auth.mode === 'oauth2' && given.routes[0]!.credential.auth.alternateTokenUrl, undefined, 'a given AUTH_TOKEN_URL is used as it is')
})

t.test('.env: egress proxy variables work from it; NODE_EXTRA_CA_CERTS there is warned about', async (t) => {
  const dir = t.testdir({ '.env': 'HTTPS_PROXY=http://proxy:3128\nNODE_EXTRA_CA_CERTS=/etc/ca.pem\nACCESS_LOG=false\n' })
  const c = loadConfig(minimal, { cwd: dir })
  t.same(c.egress, { httpsProxy: 'http://proxy:3128' })
  t.equal(c.accessLog, false)
  t.same(c.warnings, ['NODE_EXTRA_CA_CERTS in .env has no effect: Node.js reads it only when the process starts; set it in the environment'])
  t.same(problems({ ...minimal, ACCESS_LOG: 'sometimes' }), ['ACCESS_LOG must be true or false'])
})

t.test('a malformed HTTP_PROXY or HTTPS_PROXY is a configuration error, named without its password', async (t) => {
  const got = problems({ ...minimal, HTTPS_PROXY: 'http://user:pw-secret-77@[::1', http_proxy: 'socks5://user:pw-secret-77@host:1080' })
  t.same(got, [
    'HTTP_PROXY must be a proxy URL such as http://host:3128 (credentials, if any, as http://user:password@host:3128)'.replace('HTTP_PROXY', 'http_proxy'),
    'HTTPS_PROXY must be a proxy URL such as http://host:3128 (credentials, if any, as http://user:password@host:3128)'
  ])
  t.notMatch(JSON.stringify(got), 'pw-secret-77')
  // a stray % in the credentials would throw wherever they are decoded
  t.same(problems({ ...minimal, HTTPS_PROXY: 'http://user:pw%zz-secret-77@proxy:3128' }), [
    'HTTPS_PROXY must be a proxy URL such as http://host:3128 (credentials, if any, as http://user:password@host:3128)'
  ])
})

t.test('AUTH_GRANT_TYPE=client_credentials: the client secret is required, the user is not (and is warned about)', async (t) => {
  const noUser = { ...minimal, AUTH_USERNAME: undefined, AUTH_PASSWORD: undefined, AUTH_GRANT_TYPE: 'client_credentials' }
  t.same(problems(noUser), ['AUTH_CLIENT_SECRET (or AUTH_CLIENT_SECRET_FILE) is required by the client_credentials grant: a confidential client with "Service accounts roles" on (or a signed client assertion: AUTH_CLIENT_AUTH=private_key_jwt or federated_jwt)'])
  const c = loadConfig({ ...noUser, AUTH_CLIENT_SECRET: 's' }, { cwd: '/x' })
  t.match(c.routes[0]!.credential.auth, { grantType: 'client_credentials' })
  t.same(Object.keys(c.routes[0]!.credential.sources), ['clientSecret'])
  t.same(c.warnings, [])
  const withUser = loadConfig({ ...minimal, AUTH_GRANT_TYPE: 'client_credentials', AUTH_CLIENT_SECRET: 's' }, { cwd: '/x' })
  t.same(withUser.warnings, [
    'AUTH_USERNAME is not used by the client_credentials grant (AUTH_GRANT_TYPE)',
    'AUTH_PASSWORD is not used by the client_credentials grant (AUTH_GRANT_TYPE)'
  ])
  t.same(problems({ ...minimal, AUTH_GRANT_TYPE: 'implicit' }), ['AUTH_GRANT_TYPE must be one of password, client_credentials'])
  t.same(problems({ ...minimal, AUTH_PASSWORD: undefined }), ['AUTH_PASSWORD (or AUTH_PASSWORD_FILE) is required'], 'the password grant still needs its user')
})

t.test('AUTH_CLIENT_AUTH=client_secret_basic needs a client secret', async (t) => {
  t.same(problems({ ...minimal, AUTH_CLIENT_AUTH: 'client_secret_basic' }), ['AUTH_CLIENT_SECRET (or AUTH_CLIENT_SECRET_FILE) is required by AUTH_CLIENT_AUTH=client_secret_basic'])
  t.match(loadConfig({ ...minimal, AUTH_CLIENT_AUTH: 'client_secret_basic', AUTH_CLIENT_SECRET: 's' }, { cwd: '/x' }).routes[0]!.credential.auth, { clientAuth: 'client_secret_basic' })
  t.same(problems({ ...minimal, AUTH_CLIENT_AUTH: 'self_signed_tls_client_auth' }), ['AUTH_TLS_CERT_FILE and AUTH_TLS_KEY_FILE are required with AUTH_CLIENT_AUTH=self_signed_tls_client_auth: the certificate the client authenticates with'], 'a method of its own now (RFC 8705), needing its certificate')
  t.same(problems({ ...minimal, AUTH_CLIENT_AUTH: 'tls_client_auth_x' }).filter((p) => p.startsWith('AUTH_CLIENT_AUTH must be one of')).length, 1, 'an unknown method is still refused')
})

t.test('AUTH_TOKEN_PARAMS: decoded pairs; the sidecar\'s own parameters and malformed text are refused without echoing values', async (t) => {
  const c = loadConfig({ ...minimal, AUTH_TOKEN_PARAMS: 'audience=orders+api&resource=https%3A%2F%2Fa&resource=https%3A%2F%2Fb&empty=' }, { cwd: '/x' })
  t.same(c.routes[0]!.credential.auth.mode === 'oauth2' && c.routes[0]!.credential.auth.params, [['audience', 'orders api'], ['resource', 'https://a'], ['resource', 'https://b'], ['empty', '']])
  for (const name of ['grant_type', 'client_id', 'client_secret', 'username', 'password', 'refresh_token']) {
    t.same(problems({ ...minimal, AUTH_TOKEN_PARAMS: `audience=x&${name}=sneaky-value` }), [`AUTH_TOKEN_PARAMS may not set "${name}": the sidecar sets it`], name)
  }
  t.same(problems({ ...minimal, AUTH_TOKEN_PARAMS: 'scope=openid' }), ['AUTH_TOKEN_PARAMS may not set "scope": the sidecar sets it (use AUTH_SCOPE)'])
  t.same(problems({ ...minimal, AUTH_TOKEN_PARAMS: 'client%5Fsecret=sneaky-value' }), ['AUTH_TOKEN_PARAMS may not set "client_secret": the sidecar sets it'], 'an encoded name is decoded first')
  const malformed = [...problems({ ...minimal, AUTH_TOKEN_PARAMS: 'audience=%zz-sneaky' }), ...problems({ ...minimal, AUTH_TOKEN_PARAMS: 'sneaky' }), ...problems({ ...minimal, AUTH_TOKEN_PARAMS: '=sneaky' })]
  t.equal(malformed.length, 3)
  for (const p of malformed) t.match(p, /^AUTH_TOKEN_PARAMS must be name=value pairs joined by &/)
  t.notMatch(malformed.join(' '), 'sneaky')
})

t.test('AUTH_ISSUER_URL replaces AUTH_URL; AUTH_TOKEN_URL still wins for the token endpoint', async (t) => {
  const issuer = 'https://sso.internal/realms/service-realm'
  const c = loadConfig({ ...minimal, AUTH_URL: undefined, AUTH_ISSUER_URL: issuer }, { cwd: '/x' })
  t.match(c.routes[0]!.credential.auth, { issuerUrl: issuer })
  t.notOk(c.routes[0]!.credential.auth.mode === 'oauth2' && 'tokenUrl' in c.routes[0]!.credential.auth, 'the token URL comes from discovery')
  t.same(c.warnings, [])
  const both = loadConfig({ ...minimal, AUTH_ISSUER_URL: issuer }, { cwd: '/x' })
  t.same(both.warnings, ['AUTH_URL is not used when AUTH_ISSUER_URL is set: the token endpoint comes from discovery'])
  t.notOk(both.routes[0]!.credential.auth.mode === 'oauth2' && 'tokenUrl' in both.routes[0]!.credential.auth)
  const token = loadConfig({ ...minimal, AUTH_URL: undefined, AUTH_ISSUER_URL: issuer, AUTH_TOKEN_URL: 'https://t.internal/token' }, { cwd: '/x' })
  t.match(token.routes[0]!.credential.auth, { issuerUrl: issuer, tokenUrl: 'https://t.internal/token' })
  t.same(problems({ ...minimal, AUTH_ISSUER_URL: 'sso.internal' }), ['AUTH_ISSUER_URL must be an absolute http or https URL'])
  t.equal(loadConfig({ ...minimal, AUTH_LOGOUT_ON_SHUTDOWN: 'false' }, { cwd: '/x' }).routes[0]!.credential.auth.mode === 'oauth2' &&
    (loadConfig({ ...minimal, AUTH_LOGOUT_ON_SHUTDOWN: 'false' }, { cwd: '/x' }).routes[0]!.credential.auth as { logoutOnShutdown: boolean }).logoutOnShutdown, false)
})

t.test('AUTH_DISCOVERY_URL: where the document is fetched, apart from the issuer it must name', async (t) => {
  const issuer = 'https://sso.example.com/realms/service-realm'
  const base = { ...minimal, AUTH_URL: undefined, AUTH_ISSUER_URL: issuer }
  t.match(loadConfig(base, { cwd: '/x' }).routes[0]!.credential.auth, { issuerUrl: issuer, discoveryUrl: `${issuer}/.well-known/openid-configuration` }, 'the issuer\'s own document by default')
  t.match(loadConfig({ ...base, AUTH_DISCOVERY_URL: 'http://keycloak.auth:8080/realms/service-realm/' }, { cwd: '/x' }).routes[0]!.credential.auth,
    { issuerUrl: issuer, discoveryUrl: 'http://keycloak.auth:8080/realms/service-realm/.well-known/openid-configuration' }, 'an internal issuer-like address')
  t.match(loadConfig({ ...base, AUTH_DISCOVERY_URL: 'http://keycloak.auth:8080/realms/service-realm/.well-known/openid-configuration' }, { cwd: '/x' }).routes[0]!.credential.auth,
    { discoveryUrl: 'http://keycloak.auth:8080/realms/service-realm/.well-known/openid-configuration' }, 'or the document\'s whole URL')
  t.same(problems({ ...minimal, AUTH_DISCOVERY_URL: 'http://keycloak.auth:8080/realms/service-realm' }),
    ['AUTH_DISCOVERY_URL is used only with AUTH_ISSUER_URL, the issuer its document must name (the public one, such as https://sso.example.com/realms/<realm>)'])
  t.same(problems({ ...base, AUTH_DISCOVERY_URL: 'keycloak.auth' }), ['AUTH_DISCOVERY_URL must be an absolute http or https URL'])
  t.match(problems({ ...base, AUTH_DISCOVERY_URL: 'http://keycloak.auth:8080/realms/r', AUTH_CLIENT_AUTH: 'tls_client_auth' }),
    ['AUTH_TLS_CERT_FILE and AUTH_TLS_KEY_FILE are required', 'AUTH_CLIENT_AUTH=tls_client_auth needs an https auth server: http://keycloak.auth:8080/realms/r is http, where no client certificate is presented'],
    'the address dialled decides whether a certificate can be presented')
})

t.test('private_key_jwt needs a key file that holds a usable key; its problems are named, the key never quoted', async (t) => {
  const { generateKeyPairSync } = await import('node:crypto')
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }) as string
  const small = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({ type: 'pkcs8', format: 'pem' }) as string
  const dir = t.testdir({ 'rsa.pem': rsa, 'small.pem': small, 'garbage.pem': 'no key here' })
  const jwt = { ...minimal, AUTH_CLIENT_AUTH: 'private_key_jwt' }
  t.same(problems(jwt), ['AUTH_CLIENT_KEY_FILE is required with AUTH_CLIENT_AUTH=private_key_jwt'])
  t.same(problems({ ...jwt, AUTH_CLIENT_KEY_FILE: join(dir, 'missing.pem') }), ['AUTH_CLIENT_KEY_FILE cannot be read (ENOENT)'])
  t.same(problems({ ...jwt, AUTH_CLIENT_KEY_FILE: join(dir, 'garbage.pem') }), ['AUTH_CLIENT_KEY_FILE holds neither a PEM private key nor a JWK with "d"'])
  t.same(problems({ ...jwt, AUTH_CLIENT_KEY_FILE: join(dir, 'small.pem') }), ['AUTH_CLIENT_KEY_FILE holds a 1024-bit RSA key: RSA, EC P-256 or P-384, or Ed25519 is needed'])
  t.same(problems({ ...jwt, AUTH_CLIENT_KEY_FILE: join(dir, 'rsa.pem'), AUTH_CLIENT_KEY_ALG: 'ES256' }), ['AUTH_CLIENT_KEY_FILE holds AUTH_CLIENT_KEY_ALG=ES256 does not fit a 2048-bit RSA key (RS256 or PS256)'])
  t.same(problems({ ...jwt, AUTH_CLIENT_KEY_FILE: join(dir, 'rsa.pem'), AUTH_CLIENT_KEY_ALG: 'HS256' }), ['AUTH_CLIENT_KEY_ALG must be one of RS256, PS256, ES256, ES384, EdDSA'])
  const ok = loadConfig({ ...jwt, AUTH_CLIENT_KEY_FILE: join(dir, 'rsa.pem'), AUTH_CLIENT_KEY_ALG: 'PS256', AUTH_CLIENT_KEY_ID: 'k1', AUTH_CLIENT_SECRET: 'unused' }, { cwd: '/x' })
  t.match(ok.routes[0]!.credential.auth, { clientAuth: 'private_key_jwt', clientKeyAlg: 'PS256', clientKeyId: 'k1' })
  t.same(ok.routes[0]!.credential.sources.clientKey, { variable: 'AUTH_CLIENT_KEY_FILE', file: join(dir, 'rsa.pem') })
  t.same(ok.warnings, ['AUTH_CLIENT_SECRET is not used with AUTH_CLIENT_AUTH=private_key_jwt: no secret is sent'])
  for (const p of problems({ ...jwt, AUTH_CLIENT_KEY_FILE: join(dir, 'rsa.pem'), AUTH_CLIENT_KEY_ALG: 'ES256' })) t.notMatch(p, /PRIVATE KEY|MII/)
})

t.test('client_secret_jwt needs the secret; federated_jwt a readable JWT file and no secret, even for client_credentials', async (t) => {
  const dir = t.testdir({ token: 'eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln\n', notjwt: 'hello' })
  t.same(problems({ ...minimal, AUTH_CLIENT_AUTH: 'client_secret_jwt' }), ['AUTH_CLIENT_SECRET (or AUTH_CLIENT_SECRET_FILE) is required by AUTH_CLIENT_AUTH=client_secret_jwt'])
  const federated = { ...minimal, AUTH_CLIENT_AUTH: 'federated_jwt', AUTH_GRANT_TYPE: 'client_credentials', AUTH_USERNAME: '', AUTH_PASSWORD: '' }
  t.same(problems(federated), ['AUTH_CLIENT_ASSERTION_FILE is required with AUTH_CLIENT_AUTH=federated_jwt'])
  t.same(problems({ ...federated, AUTH_CLIENT_ASSERTION_FILE: join(dir, 'notjwt') }), ['AUTH_CLIENT_ASSERTION_FILE holds no JWT (three dot-separated parts)'])
  const ok = loadConfig({ ...federated, AUTH_CLIENT_ASSERTION_FILE: join(dir, 'token') }, { cwd: '/x' })
  t.same(ok.routes[0]!.credential.sources, { clientAssertion: { variable: 'AUTH_CLIENT_ASSERTION_FILE', file: join(dir, 'token') } }, 'nothing secret configured at all')
  t.same(loadConfig({ ...minimal, AUTH_CLIENT_KEY_ID: 'k', AUTH_CLIENT_ASSERTION_FILE: join(dir, 'token') }, { cwd: '/x' }).warnings, [
    'AUTH_CLIENT_KEY_ID is used only with AUTH_CLIENT_AUTH=private_key_jwt',
    'AUTH_CLIENT_ASSERTION_FILE is used only with AUTH_CLIENT_AUTH=federated_jwt'
  ])
})
