import { createHash, X509Certificate } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { createServer as createHttpsServer } from 'node:https'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import type { TLSSocket } from 'node:tls'
import t from 'tap'
import { build, CLIENT_SECRET, get, metric, until } from '../helpers/build.js'
import { TestCa } from '../helpers/certificates.js'
import { loadConfig } from '../../src/config/load.js'
import { ConfigError } from '../../src/errors.js'

const CLIENT_CREDENTIALS = { AUTH_GRANT_TYPE: 'client_credentials', AUTH_USERNAME: '', AUTH_PASSWORD: '' }

t.test('client_credentials: a service account without a user; renewal is a new client_credentials grant', async (t) => {
  const h = await build(t, CLIENT_CREDENTIALS)
  await until(() => h.app.credential.ready())
  const first = h.tokenServer.grants[0]!
  t.equal(first.grantType, 'client_credentials')
  t.equal(first.form.client_id, 'legacy-app')
  t.equal(first.form.client_secret, CLIENT_SECRET)
  t.notOk('username' in first.form || 'password' in first.form, 'no user credentials are sent')
  t.equal((await get(`${h.proxyUrl}/_verify`)).status, 200, 'the token is accepted upstream')

  // Keycloak issues no refresh token here: a rejected token is replaced by a new grant
  h.tokenServer.revoke(h.app.credential.current()!.header.slice('Bearer '.length))
  t.equal((await get(`${h.proxyUrl}/_verify`)).status, 200, 'renewed and replayed')
  t.same(h.tokenServer.grants.map((g) => g.grantType), ['client_credentials', 'client_credentials'])
  t.equal(await metric(h.adminUrl, 'auth_sidecar_token_grants_total{grant_type="client_credentials",outcome="success",route="default"}'), 2)
})

t.test('client_credentials: a refresh token, when one is issued, is used as for the password grant', async (t) => {
  const h = await build(t, CLIENT_CREDENTIALS, { clientCredentialsRefresh: true })
  await until(() => h.app.credential.ready())
  h.tokenServer.revoke(h.app.credential.current()!.header.slice('Bearer '.length))
  t.equal((await get(`${h.proxyUrl}/_verify`)).status, 200)
  t.same(h.tokenServer.grants.map((g) => g.grantType), ['client_credentials', 'refresh_token'])
})

t.test('client_credentials: Keycloak\'s refusals are configuration errors, said plainly', async (t) => {
  const publicClient = await build(t, CLIENT_CREDENTIALS, { clients: { 'legacy-app': undefined } })
  await until(() => publicClient.log.lines.some((l) => l.includes('unauthorized_client')))
  const line = publicClient.log.records().find((r) => r.outcome === 'rejected')!
  t.equal(line.level, 50, 'logged at error level')
  t.match(line.reason, /401 unauthorized_client \(Public client not allowed to retrieve service account\): the client is public; client_credentials needs a confidential client/)
  t.equal(publicClient.tokenServer.grants.length, 1, 'retried slowly, not at once')
  t.match((await get(`${publicClient.adminUrl}/readyz`)).body, /refused|rejected/)

  const disabled = await build(t, CLIENT_CREDENTIALS, { serviceAccounts: false })
  await until(() => disabled.log.lines.some((l) => l.includes('unauthorized_client')))
  t.match(disabled.log.records().find((r) => r.outcome === 'rejected')!.reason, /401 unauthorized_client \(Client not enabled to retrieve service account\): turn on "Service accounts roles"/)
})

t.test('client_secret_basic: the client id and secret form-encoded and Base64\'d in a header, not in the form', async (t) => {
  const secret = 'a:b+c%/ é&='
  const h = await build(t, { AUTH_CLIENT_AUTH: 'client_secret_basic', AUTH_CLIENT_SECRET: secret }, { clients: { 'legacy-app': secret } })
  await until(() => h.app.credential.ready())
  const first = h.tokenServer.grants[0]!
  t.equal(first.status, 200, 'the server decoded the header to the right client and secret')
  t.equal(first.clientAuth, 'basic')
  t.notOk('client_id' in first.form || 'client_secret' in first.form)
  // the refresh grant authenticates the same way
  h.tokenServer.revoke(h.app.credential.current()!.header.slice('Bearer '.length))
  t.equal((await get(`${h.proxyUrl}/_verify`)).status, 200)
  t.same(h.tokenServer.grants.map((g) => [g.grantType, g.clientAuth, g.status]), [['password', 'basic', 200], ['refresh_token', 'basic', 200]])
})

t.test('client_secret_basic: a token server echoing the Authorization header has it scrubbed from the log', async (t) => {
  // letters and digits only: the header is then the same whatever each part's form encoding
  const secret = 'basicsecret0f9e8d'
  const header = Buffer.from(`legacyapp:${secret}`).toString('base64')
  const h = await build(t, { AUTH_CLIENT_AUTH: 'client_secret_basic', AUTH_CLIENT_ID: 'legacyapp', AUTH_CLIENT_SECRET: secret }, { clients: { legacyapp: secret } }, {
    faults: [{ status: 503, body: JSON.stringify({ error: 'temporarily_unavailable', error_description: `saw Authorization: Basic ${header}` }) }]
  })
  await until(() => h.app.credential.ready())
  t.match(h.log.lines.join('\n'), /saw Authorization: Basic \[redacted\]/, 'the failure was logged, scrubbed')
  t.notMatch(h.log.lines.join('\n'), header)
  t.notMatch(h.log.lines.join('\n'), secret)
})

t.test('AUTH_TOKEN_PARAMS: sent with every grant, decoded, repeated names kept', async (t) => {
  const h = await build(t, { AUTH_TOKEN_PARAMS: 'audience=orders-api&resource=https%3A%2F%2Fa.example&resource=https%3A%2F%2Fb.example' })
  await until(() => h.app.credential.ready())
  h.tokenServer.revoke(h.app.credential.current()!.header.slice('Bearer '.length))
  t.equal((await get(`${h.proxyUrl}/_verify`)).status, 200)
  t.equal(h.tokenServer.grants.length, 2)
  for (const g of h.tokenServer.grants) {
    t.same(g.params.filter(([n]) => n === 'audience' || n === 'resource'), [
      ['audience', 'orders-api'], ['resource', 'https://a.example'], ['resource', 'https://b.example']
    ], `${g.grantType} grant`)
    t.equal(g.form.grant_type, g.grantType, 'the sidecar\'s own fields are untouched')
  }
})

t.test('self_signed_tls_client_auth (RFC 8705 2.2): a self-signed certificate is the client\'s proof; no secret is needed or sent', async (t) => {
  const dir = t.testdir({})
  const ca = TestCa.create(join(dir, 'ca'))
  const server = ca.issue('server', { cn: '127.0.0.1', san: 'IP:127.0.0.1' })
  // a self-signed certificate: the one a CA of its own signs itself with, registered with the server as it is
  TestCa.create(join(dir, 'own'), 'sidecar-self-signed')
  const registered = createHash('sha256').update(new X509Certificate(readFileSync(join(dir, 'own', 'ca.pem'))).raw).digest('base64url')
  const forms: Array<{ form: Record<string, string>, authorization: string | undefined, presented: string | undefined }> = []
  const tokens = createHttpsServer({ key: server.key, cert: server.cert, requestCert: true, rejectUnauthorized: false }, (req, res) => {
    let body = ''
    req.on('data', (chunk: Buffer) => { body += chunk.toString() })
    req.on('end', () => {
      const peer = (req.socket as TLSSocket).getPeerCertificate()
      const presented = peer.raw === undefined ? undefined : createHash('sha256').update(peer.raw).digest('base64url')
      forms.push({ form: Object.fromEntries(new URLSearchParams(body)), authorization: req.headers.authorization, presented })
      const known = presented === registered
      res.writeHead(known ? 200 : 401, { 'content-type': 'application/json' })
      res.end(JSON.stringify(known ? { access_token: `opaque-${forms.length}`, token_type: 'Bearer', expires_in: 300 } : { error: 'invalid_client' }))
    })
  })
  await new Promise<void>((resolve) => tokens.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { tokens.closeAllConnections(); tokens.close() })
  const h = await build(t, {
    ...CLIENT_CREDENTIALS,
    AUTH_URL: '',
    AUTH_TOKEN_URL: `https://127.0.0.1:${(tokens.address() as AddressInfo).port}/token`,
    AUTH_CLIENT_AUTH: 'self_signed_tls_client_auth',
    AUTH_CLIENT_SECRET: '',
    AUTH_TLS_CERT_FILE: join(dir, 'own', 'ca.pem'),
    AUTH_TLS_KEY_FILE: join(dir, 'own', 'ca.key'),
    AUTH_TLS_CA_FILE: ca.caFile
  })
  await until(() => h.app.credential.ready())
  t.same(forms[0], { form: { grant_type: 'client_credentials', client_id: 'legacy-app' }, authorization: undefined, presented: registered }, 'the client id in the form, the certificate on the connection, nothing secret')
})

t.test('self_signed_tls_client_auth needs the certificate and an https auth server, as tls_client_auth does, and no secret', async (t) => {
  const base = { BASE_URL: 'http://127.0.0.1:1', AUTH_CLIENT_ID: 'svc', AUTH_GRANT_TYPE: 'client_credentials', AUTH_CLIENT_AUTH: 'self_signed_tls_client_auth' }
  const problems = (env: Record<string, string>): readonly string[] => {
    try {
      loadConfig({ ...base, ...env }, { cwd: '/nonexistent' })
      return []
    } catch (err) {
      return (err as ConfigError).problems
    }
  }
  t.same(problems({ AUTH_TOKEN_URL: 'https://as.example/token' }), ['AUTH_TLS_CERT_FILE and AUTH_TLS_KEY_FILE are required with AUTH_CLIENT_AUTH=self_signed_tls_client_auth: the certificate the client authenticates with'])
  const dir = t.testdir({})
  const own = TestCa.create(join(dir, 'own'), 'sidecar-self-signed')
  const files = { AUTH_TLS_CERT_FILE: own.caFile, AUTH_TLS_KEY_FILE: join(dir, 'own', 'ca.key') }
  t.same(problems({ AUTH_TOKEN_URL: 'http://as.example/token', ...files }), ['AUTH_CLIENT_AUTH=self_signed_tls_client_auth needs an https auth server: http://as.example/token is http, where no client certificate is presented'])
  const config = loadConfig({ ...base, AUTH_TOKEN_URL: 'https://as.example/token', ...files, AUTH_CLIENT_SECRET: 'unused' }, { cwd: '/nonexistent' })
  t.match(config.routes[0]!.credential.auth, { clientAuth: 'self_signed_tls_client_auth' }, 'no secret required')
  t.ok(config.warnings.includes('AUTH_CLIENT_SECRET is not used with AUTH_CLIENT_AUTH=self_signed_tls_client_auth: no secret is sent'))
})
