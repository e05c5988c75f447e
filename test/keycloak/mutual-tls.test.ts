import { randomBytes } from 'node:crypto'
import { readFileSync, renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Agent, request } from 'undici'
import { send, until } from '../helpers/build.js'
import { TestCa } from '../helpers/certificates.js'
import { keycloakTest } from '../helpers/keycloak.js'
import { root, spawnSidecar, start, untilReady } from '../helpers/process.js'

/** As cert-manager or the kubelet replace a file: a whole new file renamed into place. */
function replace (file: string, text: string): void {
  writeFileSync(`${file}.new`, text)
  renameSync(`${file}.new`, file)
}

keycloakTest('mutual TLS against Keycloak: the X509 client authenticator, certificate-bound tokens accepted by userinfo, the certificate renewed while it runs', async (t, kc) => {
  const realm = await kc.root.realm(t)
  const ca = TestCa.open(kc.root.https!.caDir)
  const tag = randomBytes(3).toString('hex')
  const first = ca.issue(`first-${tag}`, { cn: `sidecar-${tag}-first` })
  const second = ca.issue(`second-${tag}`, { cn: `sidecar-${tag}-second` })
  // Keycloak's "X509 Certificate" client authenticator, the subject matched by a regular expression, tokens bound
  await realm.api('POST', '/clients', {
    clientId: 'mtls-app',
    enabled: true,
    publicClient: false,
    serviceAccountsEnabled: true,
    standardFlowEnabled: false,
    directAccessGrantsEnabled: false,
    clientAuthenticatorType: 'client-x509',
    attributes: {
      'x509.subjectdn': `CN=sidecar-${tag}-(first|second)`,
      'x509.allow.regex.pattern.comparison': 'true',
      'tls.client.certificate.bound.access.tokens': 'true'
    }
  })
  const dir = t.testdir({ 'tls.crt': first.cert, 'tls.key': first.key })
  const files = { TLS_CERT_FILE: join(dir, 'tls.crt'), TLS_KEY_FILE: join(dir, 'tls.key'), TLS_CA_FILE: ca.caFile }
  const env = {
    AUTH_ISSUER_URL: realm.httpsIssuer,
    AUTH_CLIENT_ID: 'mtls-app',
    AUTH_GRANT_TYPE: 'client_credentials',
    AUTH_CLIENT_AUTH: 'tls_client_auth',
    // userinfo answers tokens with the openid scope only
    AUTH_SCOPE: 'openid',
    AUTH_USERNAME: '',
    ...Object.fromEntries(Object.entries(files).flatMap(([name, file]) => [[`AUTH_${name}`, file], [`UPSTREAM_${name}`, file]]))
  }
  // Keycloak's userinfo endpoint is the resource server: it checks that the token's certificate is the connection's
  const baseUrl = `${realm.httpsIssuer}/protocol/openid-connect`

  // check first, as an operator would
  const check = start({ BASE_URL: baseUrl, ...env }, root, ['check', '--path', '/userinfo'])
  t.equal(await check.exited, 0, check.stdout.join('\n'))
  const said = check.stdout.join('\n')
  t.match(said, new RegExp(`ok {3}certificate upstream: subject CN=sidecar-${tag}-first, expires \\d{4}-[^,]+, x5t#S256 [A-Za-z0-9_-]{43}`))
  t.match(said, /ok {3}discovery: .*token endpoint https:\/\/127\.0\.0\.1:\d+\/realms\/test-\w+\/protocol\/openid-connect\/token/)
  t.match(said, /ok {3}grant: client_credentials grant at \S+ \(tls_client_auth\): .*bound to the client certificate \(cnf x5t#S256 [A-Za-z0-9_-]{43}\), which the upstream gets too/)
  t.match(said, /ok {3}upstream: GET \S+\/userinfo answered 200/)

  const sidecar = await spawnSidecar(t, baseUrl, '', '', env)
  await untilReady(sidecar)
  const userinfo = await send(`${sidecar.proxyUrl}/userinfo`)
  t.equal(userinfo.status, 200, userinfo.body)
  t.equal((JSON.parse(userinfo.body) as { preferred_username: string }).preferred_username, 'service-account-mtls-app')

  // the binding is Keycloak's to enforce: a token of this client is refused by userinfo without its certificate
  const withCertificate = new Agent({ connect: { cert: first.cert, key: first.key, ca: readFileSync(ca.caFile) } })
  const bare = new Agent({ connect: { ca: readFileSync(ca.caFile) } })
  t.teardown(async () => { await withCertificate.close(); await bare.close() })
  const token = await request(`${baseUrl}/token`, { method: 'POST', dispatcher: withCertificate, headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'grant_type=client_credentials&client_id=mtls-app&scope=openid' })
  const { access_token: accessToken } = await token.body.json() as { access_token: string }
  const cnf = (JSON.parse(Buffer.from(accessToken.split('.')[1]!, 'base64url').toString()) as { cnf?: Record<string, string> }).cnf
  t.match(cnf, { 'x5t#S256': /^[A-Za-z0-9_-]{43}$/ }, 'Keycloak binds the token to the certificate')
  const without = await request(`${baseUrl}/userinfo`, { dispatcher: bare, headers: { authorization: `Bearer ${accessToken}` } })
  await without.body.dump()
  t.equal(without.statusCode, 401, 'and userinfo refuses it over a connection without that certificate')

  // the files renewed while requests flow: every request answered, the new certificate used without a restart
  const grantsBefore = (await realm.events(['CLIENT_LOGIN'])).length
  const statuses: number[] = []
  let running = true
  const traffic = (async () => {
    while (running) {
      statuses.push((await send(`${sidecar.proxyUrl}/userinfo`)).status)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  })()
  await new Promise((resolve) => setTimeout(resolve, 500))
  replace(files.TLS_KEY_FILE, second.key)
  replace(files.TLS_CERT_FILE, second.cert)
  await until(() => sidecar.run.stdout.some((l) => l.includes('client certificate renewed')), 10_000)
  await until(() => sidecar.run.stdout.filter((l) => l.includes('"event":"token"') && l.includes('token obtained')).length >= 2, 10_000)
  await new Promise((resolve) => setTimeout(resolve, 1_000))
  running = false
  await traffic
  t.ok(statuses.length > 10, `${statuses.length} requests during the renewal`)
  t.same([...new Set(statuses)], [200], 'each one accepted by userinfo: token and certificate always matched')
  const logins = await realm.events(['CLIENT_LOGIN', 'CLIENT_LOGIN_ERROR'])
  t.ok(logins.length > grantsBefore && logins.every((e) => e.type === 'CLIENT_LOGIN'), 'a new grant with the new certificate, none refused')
  t.same(await realm.events(['USER_INFO_REQUEST_ERROR']).then((e) => e.length), 1, 'the only userinfo refusal is the test\'s own, without the certificate')

  sidecar.run.child.kill('SIGTERM')
  t.equal(await sidecar.run.exited, 0)
  const revoked = await realm.events(['REVOKE_GRANT', 'REVOKE_GRANT_ERROR'])
  t.match(revoked.map((e) => `${e.type} ${e.clientId ?? ''}`), ['REVOKE_GRANT mtls-app'], 'the token revoked at shutdown, the client authenticated by its certificate')
  t.notMatch(sidecar.run.stdout.join('\n'), /PRIVATE KEY|eyJ[A-Za-z0-9_-]{20,}\.eyJ/, 'no key or token logged')
})
