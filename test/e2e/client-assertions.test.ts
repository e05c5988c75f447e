import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import { renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { decodeProtectedHeader, jwtVerify, SignJWT } from 'jose'
import t from 'tap'
import { send, until } from '../helpers/build.js'
import { root, start, startSidecar } from '../helpers/process.js'

/** As the kubelet replaces a mounted file: a new file renamed into place. */
function replace (file: string, text: string): void {
  writeFileSync(`${file}.new`, text)
  renameSync(`${file}.new`, file)
}

const pem = (key: KeyObject): string => key.export({ type: 'pkcs8', format: 'pem' }) as string

t.test('private_key_jwt: every request (grants, refresh, session ending) carries a signed assertion and no secret; a rotated key is used from the next one', async (t) => {
  const first = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const second = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const dir = t.testdir({ 'client.pem': pem(first.privateKey) })
  const s = await startSidecar(t, { AUTH_CLIENT_AUTH: 'private_key_jwt', AUTH_CLIENT_KEY_FILE: join(dir, 'client.pem') }, { clients: { 'legacy-app': 'not-used' } })
  t.equal((await send(`${s.proxyUrl}/_verify`)).status, 200)
  const grant = s.tokenServer.grants[0]!
  t.equal(grant.clientAuth, 'jwt')
  t.equal(grant.form.client_secret, undefined, 'no client secret')
  const { payload } = await jwtVerify(grant.form.client_assertion!, first.publicKey, { issuer: 'legacy-app', subject: 'legacy-app', audience: s.tokenServer.tokenUrl })
  t.equal(payload.exp! - payload.iat!, 60)

  replace(join(dir, 'client.pem'), pem(second.privateKey))
  // a 401 from the upstream makes the next token request now: a refresh
  s.upstream.rejectTokens.add(s.upstream.received.at(-1)!.headers.authorization!)
  t.equal((await send(`${s.proxyUrl}/_verify`)).status, 200)
  const refresh = s.tokenServer.grants.at(-1)!
  t.equal(refresh.grantType, 'refresh_token')
  await jwtVerify(refresh.form.client_assertion!, second.publicKey, { audience: s.tokenServer.tokenUrl })
  t.not(decodeProtectedHeader(refresh.form.client_assertion!).kid, decodeProtectedHeader(grant.form.client_assertion!).kid, 'the new key\'s kid')

  s.run.child.kill('SIGTERM')
  t.equal(await s.run.exited, 0)
  const logout = s.tokenServer.logouts[0]!
  t.equal(logout.clientAuth, 'jwt', 'the session ending authenticates the same way')
  await jwtVerify(logout.form.client_assertion!, second.publicKey, { audience: s.tokenServer.tokenUrl })
  const output = s.run.stdout.join('\n') + s.run.stderr.join('')
  for (const assertion of [grant.form.client_assertion!, refresh.form.client_assertion!, logout.form.client_assertion!]) t.notOk(output.includes(assertion.split('.')[2]!), 'no assertion or signature in the output')
  t.notMatch(output, /PRIVATE KEY/)
})

t.test('check says how the client authenticated, with the key\'s kid', async (t) => {
  const key = generateKeyPairSync('ed25519')
  const dir = t.testdir({ 'client.pem': pem(key.privateKey) })
  // the servers this test's check talks to (beside a sidecar of their own)
  const s = await startSidecar(t, { AUTH_CLIENT_SECRET: 'not-used' }, { clients: { 'legacy-app': 'not-used' } })
  const run = start({
    BASE_URL: `${s.upstream.url}/api`,
    AUTH_URL: s.tokenServer.url,
    AUTH_CLIENT_ID: 'legacy-app',
    AUTH_USERNAME: 'service-user',
    AUTH_PASSWORD: 'e2e-password-5d4c3b',
    AUTH_CLIENT_AUTH: 'private_key_jwt',
    AUTH_CLIENT_KEY_FILE: join(dir, 'client.pem'),
    AUTH_CLIENT_KEY_ID: 'key-2026-11'
  }, root, ['check'])
  t.equal(await run.exited, 0, run.stdout.join('\n'))
  t.match(run.stdout.join('\n'), /ok {3}configuration: oauth2, password grant as client legacy-app \(private_key_jwt\)/)
  t.match(run.stdout.join('\n'), /ok {3}grant: password grant at \S+ \(private_key_jwt, key kid key-2026-11 \(EdDSA\)\)/)
  t.notMatch(run.stdout.join('\n'), /eyJ|PRIVATE KEY/)
})

async function projectedToken (key: KeyObject, subject: string, secondsLeft: number): Promise<string> {
  const now = Math.floor(Date.now() / 1000)
  return await new SignJWT({ 'kubernetes.io': { namespace: 'apps', serviceaccount: { name: 'legacy' } } })
    .setProtectedHeader({ alg: 'ES256', kid: 'k8s' })
    .setIssuer('https://kubernetes.default.svc.cluster.local')
    .setSubject(subject)
    .setAudience('http://sso.example/realms/service-realm')
    .setIssuedAt(now)
    .setExpirationTime(now + secondsLeft)
    .sign(key)
}

t.test('federated_jwt with client_credentials: the file\'s JWT sent as it is, a replaced one used next; an expired one is not sent and the log names the file', async (t) => {
  const issuerKey = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey
  const firstToken = await projectedToken(issuerKey, 'system:serviceaccount:apps:legacy', 600)
  const dir = t.testdir({ token: firstToken })
  const s = await startSidecar(t, {
    AUTH_GRANT_TYPE: 'client_credentials',
    AUTH_CLIENT_AUTH: 'federated_jwt',
    AUTH_CLIENT_ASSERTION_FILE: join(dir, 'token'),
    AUTH_USERNAME: '',
    AUTH_PASSWORD: '',
    TOKEN_REJECTED_RETRY_MS: '60000'
  }, { clients: { 'legacy-app': 'not-used' }, accessTokenSeconds: 2 })
  t.equal(s.tokenServer.grants[0]!.form.client_assertion, firstToken, 'sent exactly as the file holds it')
  t.equal(s.tokenServer.grants[0]!.form.client_secret, undefined)

  const secondToken = await projectedToken(issuerKey, 'system:serviceaccount:apps:legacy', 600)
  replace(join(dir, 'token'), secondToken)
  await until(() => s.tokenServer.grants.length >= 2, 5_000) // tokens live 2 s: renewed within one
  t.equal(s.tokenServer.grants[1]!.form.client_assertion, secondToken, 'the new JWT from the next request on')

  const grantsBefore = s.tokenServer.grants.length
  replace(join(dir, 'token'), await projectedToken(issuerKey, 'system:serviceaccount:apps:legacy', -30))
  await until(() => s.run.stdout.some((l) => l.includes('AUTH_CLIENT_ASSERTION_FILE holds a JWT that expired')), 5_000)
  const line = JSON.parse(s.run.stdout.find((l) => l.includes('AUTH_CLIENT_ASSERTION_FILE holds a JWT that expired'))!) as Record<string, unknown>
  t.equal(line.level, 50, 'an error')
  t.equal(s.tokenServer.grants.length, grantsBefore, 'the expired JWT was not sent')
  await until(() => s.run.stdout.some((l) => l.includes('"event":"token"') && l.includes('the client credential cannot be used')), 5_000)
  const fresh = await projectedToken(issuerKey, 'system:serviceaccount:apps:legacy', 600)
  replace(join(dir, 'token'), fresh)
  await until(() => s.tokenServer.grants.at(-1)?.form.client_assertion === fresh, 5_000).catch(() => {})
  t.equal(s.tokenServer.grants.at(-1)?.form.client_assertion, fresh, 'a valid file is tried at once, not after the minute-long pause')
  const output = s.run.stdout.join('\n')
  for (const token of [firstToken, secondToken, fresh]) t.notOk(output.includes(token.split('.')[2]!), 'no assertion in the log')
})
