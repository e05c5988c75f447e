// client_credentials against oidc-provider with each way a client
// authenticates; an API that introspects every token shows what the
// upstream got, the server's own record what the sidecar sent.
import { execFileSync } from 'node:child_process'
import { X509Certificate } from 'node:crypto'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { calculateJwkThumbprint, exportJWK, exportPKCS8, generateKeyPair } from 'jose'
import t, { type Test } from 'tap'
import { send } from '../helpers/build.js'
import { untilToken } from '../helpers/process.js'
import { API_CLIENT, serviceClient, startProvider, startSidecar, testCa, tokenCheckingApi } from '../helpers/oidc-provider.js'

// a secret in the characters a server may issue (RFC 6749 VSCHAR) that Basic
// needs form-urlencoded: space, '+', '%', ':' and '/'
const SECRET = 'orders sidecar+secret%41:with/escapes=9a8b'

function noSecretIn (t: Test, output: string): void {
  t.notMatch(output, SECRET, 'the secret appears nowhere in the output')
  t.notMatch(output, /eyJ[\w-]{10,}\.[\w-]{10,}/, 'nor a token or an assertion')
}

t.test('client_secret_basic: the client id and secret form-urlencoded in the header, the server authenticates the client', async (t) => {
  // a colon in the client id too: unencoded, it would end the id early
  const op = await startProvider(t, { clients: [API_CLIENT, serviceClient({ client_id: 'orders:sidecar', client_secret: SECRET, token_endpoint_auth_method: 'client_secret_basic' })] })
  const api = await tokenCheckingApi(t, op)
  const s = await startSidecar(t, op, api.url, { AUTH_CLIENT_ID: 'orders:sidecar', AUTH_CLIENT_SECRET: SECRET, AUTH_CLIENT_AUTH: 'client_secret_basic' })
  const reply = await send(`${s.proxyUrl}/orders`)
  t.equal(reply.status, 200, reply.body)
  t.same(JSON.parse(reply.body), { client_id: 'orders:sidecar' }, 'the API got a token the server vouches for, issued to this client')
  const grant = op.tokenRequests()[0]!
  t.match(grant, { status: 200, grantType: 'client_credentials', authorization: 'Basic', clientId: 'orders:sidecar', clientAuthMethod: 'client_secret_basic' })
  t.notOk(grant.fields.includes('client_secret'), 'no secret in the form')
  t.equal(op.grants().length, 1)
  noSecretIn(t, s.run.stdout.join('\n') + s.run.stderr.join(''))
})

t.test('client_secret_post: the client id and secret in the form, no Authorization header', async (t) => {
  const op = await startProvider(t, { clients: [API_CLIENT, serviceClient({ client_id: 'orders-sidecar', client_secret: SECRET, token_endpoint_auth_method: 'client_secret_post' })] })
  const api = await tokenCheckingApi(t, op)
  const s = await startSidecar(t, op, api.url, { AUTH_CLIENT_ID: 'orders-sidecar', AUTH_CLIENT_SECRET: SECRET, AUTH_CLIENT_AUTH: 'client_secret_post' })
  const reply = await send(`${s.proxyUrl}/orders`)
  t.equal(reply.status, 200, reply.body)
  t.same(JSON.parse(reply.body), { client_id: 'orders-sidecar' })
  const grant = op.tokenRequests()[0]!
  t.match(grant, { status: 200, grantType: 'client_credentials', formClientId: 'orders-sidecar', clientAuthMethod: 'client_secret_post' })
  t.equal(grant.authorization, undefined, 'no Authorization header')
  t.ok(grant.fields.includes('client_secret'))
  noSecretIn(t, s.run.stdout.join('\n') + s.run.stderr.join(''))
})

for (const alg of ['ES256', 'RS256'] as const) {
  t.test(`private_key_jwt (${alg}): an assertion the server verifies with the key it holds for the client, picked by kid`, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'interop-client-key-'))
    const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true })
    const keyFile = join(dir, 'client.key')
    writeFileSync(keyFile, await exportPKCS8(privateKey), { mode: 0o600 })
    const jwk = await exportJWK(publicKey)
    // another key of the same kind listed first: the server must be told which one signed
    const other = await exportJWK((await generateKeyPair(alg, { extractable: true })).publicKey)
    const jwks = { keys: [{ ...other, kid: await calculateJwkThumbprint(other), use: 'sig' }, { ...jwk, kid: await calculateJwkThumbprint(jwk), use: 'sig' }] }
    const op = await startProvider(t, { clients: [API_CLIENT, serviceClient({ client_id: 'orders-sidecar', token_endpoint_auth_method: 'private_key_jwt', token_endpoint_auth_signing_alg: alg, jwks })] })
    const api = await tokenCheckingApi(t, op)
    const s = await startSidecar(t, op, api.url, { AUTH_CLIENT_ID: 'orders-sidecar', AUTH_CLIENT_AUTH: 'private_key_jwt', AUTH_CLIENT_KEY_FILE: keyFile })
    const reply = await send(`${s.proxyUrl}/orders`)
    t.equal(reply.status, 200, reply.body)
    t.same(JSON.parse(reply.body), { client_id: 'orders-sidecar' })
    const grant = op.tokenRequests()[0]!
    t.match(grant, { status: 200, clientId: 'orders-sidecar', clientAuthMethod: 'private_key_jwt' })
    t.ok(grant.fields.includes('client_assertion') && grant.fields.includes('client_assertion_type'), 'an assertion in the form')
    t.notOk(grant.fields.includes('client_secret'))
    t.equal(grant.authorization, undefined)
    noSecretIn(t, s.run.stdout.join('\n') + s.run.stderr.join(''))
  })
}

t.test('tls_client_auth with certificate-bound tokens: the certificate authenticates the client, and the token works only with it', async (t) => {
  const ca = testCa('interop mTLS CA')
  const client = ca.issue('sidecar', { cn: 'orders-sidecar' })
  const other = ca.issue('other', { cn: 'someone-else' })
  const op = await startProvider(t, {
    tls: { ca },
    clients: [API_CLIENT, serviceClient({ client_id: 'orders-sidecar', token_endpoint_auth_method: 'tls_client_auth', tls_client_auth_subject_dn: 'CN=orders-sidecar', tls_client_certificate_bound_access_tokens: true })]
  })
  const api = await tokenCheckingApi(t, op, { tls: { ca } })
  const mtls = { AUTH_CLIENT_ID: 'orders-sidecar', AUTH_CLIENT_AUTH: 'tls_client_auth', AUTH_TLS_CERT_FILE: client.certFile, AUTH_TLS_KEY_FILE: client.keyFile, UPSTREAM_TLS_CA_FILE: ca.caFile }
  const s = await startSidecar(t, op, api.url, { ...mtls, UPSTREAM_TLS_CERT_FILE: client.certFile, UPSTREAM_TLS_KEY_FILE: client.keyFile })
  const reply = await send(`${s.proxyUrl}/orders`)
  t.equal(reply.status, 200, reply.body)
  const call = api.calls.at(-1)!
  const x5t = op.thumbprint(client.cert)
  t.same(call.token?.cnf, { 'x5t#S256': x5t }, 'the server bound the token to the sidecar\'s certificate')
  t.equal(call.certificate, x5t, 'and the API got it over a connection with that certificate')
  const grant = op.tokenRequests()[0]!
  t.match(grant, { status: 200, clientId: 'orders-sidecar', clientAuthMethod: 'tls_client_auth', certificate: x5t })
  t.notOk(grant.fields.some((f) => f === 'client_secret' || f === 'client_assertion'), 'no secret and no assertion')

  // control: the same token over a connection with another certificate is refused by the API
  const mismatched = await startSidecar(t, op, api.url, { ...mtls, UPSTREAM_TLS_CERT_FILE: other.certFile, UPSTREAM_TLS_KEY_FILE: other.keyFile })
  const refused = await send(`${mismatched.proxyUrl}/orders`)
  t.equal(refused.status, 401, 'a bound token with another certificate does not work')
  t.match(api.calls.at(-1)!.reason, /bound to another certificate/)
})

t.test('self_signed_tls_client_auth: a self-signed certificate registered in the client\'s JWKS authenticates it, no secret', async (t) => {
  const ca = testCa('interop server CA')
  const dir = mkdtempSync(join(tmpdir(), 'interop-self-signed-'))
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', 'self.key', '-out', 'self.pem', '-days', '2', '-subj', '/CN=orders-sidecar'], { cwd: dir, stdio: 'ignore' })
  const pem = readFileSync(join(dir, 'self.pem'), 'utf8')
  const cert = new X509Certificate(pem)
  const jwk = { ...cert.publicKey.export({ format: 'jwk' }), x5c: [cert.raw.toString('base64')], use: 'sig' }
  const op = await startProvider(t, {
    tls: { ca },
    clients: [API_CLIENT, serviceClient({ client_id: 'orders-sidecar', token_endpoint_auth_method: 'self_signed_tls_client_auth', jwks: { keys: [jwk] }, tls_client_certificate_bound_access_tokens: true })]
  })
  const api = await tokenCheckingApi(t, op)
  const s = await startSidecar(t, op, api.url, { AUTH_CLIENT_ID: 'orders-sidecar', AUTH_CLIENT_AUTH: 'self_signed_tls_client_auth', AUTH_TLS_CERT_FILE: join(dir, 'self.pem'), AUTH_TLS_KEY_FILE: join(dir, 'self.key') }, false)
  await op.event('grant.success')
  const grant = op.tokenRequests().find((r) => r.status === 200)!
  t.match(grant, { clientId: 'orders-sidecar', clientAuthMethod: 'self_signed_tls_client_auth', certificate: op.thumbprint(pem) })
  t.notOk(grant.fields.some((f) => f === 'client_secret' || f === 'client_assertion'))
  await untilToken(s.run)
  t.pass('the sidecar holds the token')
})
