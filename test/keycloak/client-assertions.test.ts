import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import { renameSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { calculateJwkThumbprint, exportJWK, SignJWT, type JWK } from 'jose'
import type { Test } from 'tap'
import { send, until } from '../helpers/build.js'
import { keycloakTest } from '../helpers/keycloak.js'
import { spawnSidecar, untilReady } from '../helpers/process.js'
import { resourceServer } from '../helpers/resource-server.js'

/** As the kubelet replaces a mounted file: a new file renamed into place. */
function replace (file: string, text: string): void {
  writeFileSync(`${file}.new`, text)
  renameSync(`${file}.new`, file)
}

/** A loopback server for JSON documents whose content the test changes; counts the requests per path. */
async function jsonServer (t: Test, documents: Record<string, unknown>): Promise<{ url: string, hits: Record<string, number> }> {
  const hits: Record<string, number> = {}
  const server = createServer((req, res) => {
    const path = req.url ?? ''
    hits[path] = (hits[path] ?? 0) + 1
    const body = documents[path]
    res.writeHead(body === undefined ? 404 : 200, { 'content-type': 'application/json' })
    res.end(JSON.stringify(body ?? { error: 'not found' }))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, hits }
}

const publicJwk = async (key: KeyObject, kid?: string): Promise<JWK> => {
  const jwk = await exportJWK(key)
  return { ...jwk, kid: kid ?? await calculateJwkThumbprint(jwk), use: 'sig', alg: 'ES256' }
}

keycloakTest('private_key_jwt against Keycloak\'s "Signed JWT" with a JWKS URL: grants, refreshes and the logout authenticated, the key rotated while it runs', async (t, kc) => {
  const realm = await kc.root.realm(t, { accessTokenLifespan: 8 })
  const first = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const second = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  // keys published under their RFC 7638 thumbprints, as the sidecar names them by default
  const documents: Record<string, unknown> = { '/jwks': { keys: [await publicJwk(first.publicKey)] } }
  const jwks = await jsonServer(t, documents)
  await realm.updateClient('legacy-app', {
    clientAuthenticatorType: 'client-jwt',
    attributes: { 'use.jwks.url': 'true', 'jwks.url': `${jwks.url}/jwks`, 'token.endpoint.auth.signing.alg': 'ES256' }
  })
  const dir = t.testdir({ 'client.pem': first.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string })
  const api = await resourceServer(t, realm.issuer, realm.jwksUrl)
  const sidecar = await spawnSidecar(t, api.url, '', 'service-user-password-5e1f', {
    AUTH_ISSUER_URL: realm.issuer,
    AUTH_CLIENT_AUTH: 'private_key_jwt',
    AUTH_CLIENT_KEY_FILE: join(dir, 'client.pem')
  })
  await untilReady(sidecar)
  t.equal((await send(`${sidecar.proxyUrl}/a`)).status, 200)

  // Rotation as a platform would do it: the new key is published, then the
  // sidecar's key file replaced; its assertions name the new kid from then on.
  documents['/jwks'] = { keys: [await publicJwk(first.publicKey), await publicJwk(second.publicKey)] }
  await new Promise((resolve) => setTimeout(resolve, 11_000)) // Keycloak fetches a client's JWKS at most every 10 s
  const fetchesBefore = jwks.hits['/jwks'] ?? 0
  replace(join(dir, 'client.pem'), second.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string)
  const events = async (): Promise<string[]> => (await realm.events(['LOGIN', 'LOGIN_ERROR', 'REFRESH_TOKEN', 'REFRESH_TOKEN_ERROR'])).map((e) => e.type)
  const statuses: number[] = []
  const deadline = Date.now() + 12_000
  while (Date.now() < deadline) {
    statuses.push((await send(`${sidecar.proxyUrl}/b`)).status)
    await new Promise((resolve) => setTimeout(resolve, 300))
  }
  t.same([...new Set(statuses)], [200], 'every request served across the rotation')
  t.ok((jwks.hits['/jwks'] ?? 0) > fetchesBefore, 'Keycloak fetched the JWKS again for the new kid')
  t.same((await events()).filter((e) => e.endsWith('_ERROR')), [], 'no grant refused')
  t.ok((await events()).filter((e) => e === 'REFRESH_TOKEN').length >= 2, 'refreshes before and after the rotation')
  t.ok(sidecar.run.stdout.some((l) => l.includes('"grant":"refresh_token"') && l.includes('"outcome":"success"')))

  sidecar.run.child.kill('SIGTERM')
  t.equal(await sidecar.run.exited, 0)
  t.same(await realm.sessions('service-user'), [], 'the logout, authenticated with the new key, ended the session')
  t.notMatch(sidecar.run.stdout.join('\n'), /PRIVATE KEY|client_assertion/)
})

keycloakTest('federated_jwt against Keycloak\'s "Signed JWT - Federated": a projected service-account token from a stand-in Kubernetes issuer, replaced while it runs', async (t, kc) => {
  const realm = await kc.root.realm(t, { accessTokenLifespan: 5 })
  const issuerKey = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  // the Kubernetes API server's discovery and JWKS, on loopback
  const documents: Record<string, unknown> = {}
  const issuer = await jsonServer(t, documents)
  documents['/.well-known/openid-configuration'] = { issuer: issuer.url, jwks_uri: `${issuer.url}/openid/v1/jwks`, response_types_supported: ['id_token'], subject_types_supported: ['public'], id_token_signing_alg_values_supported: ['ES256'] }
  documents['/openid/v1/jwks'] = { keys: [await publicJwk(issuerKey.publicKey, 'k8s-1')] }
  await realm.api('POST', '/identity-provider/instances', { alias: 'kubernetes', providerId: 'kubernetes', enabled: true, config: { issuer: issuer.url } })
  const subject = 'system:serviceaccount:apps:legacy-app'
  await realm.api('POST', '/clients', {
    clientId: 'workload', enabled: true, publicClient: false, serviceAccountsEnabled: true, standardFlowEnabled: false,
    clientAuthenticatorType: 'federated-jwt',
    attributes: { 'jwt.credential.issuer': 'kubernetes', 'jwt.credential.sub': subject }
  })
  const projected = async (): Promise<string> => {
    const now = Math.floor(Date.now() / 1000)
    return await new SignJWT({ 'kubernetes.io': { namespace: 'apps', serviceaccount: { name: 'legacy-app' } } })
      .setProtectedHeader({ alg: 'ES256', kid: 'k8s-1' })
      .setIssuer(issuer.url).setSubject(subject).setAudience(realm.issuer)
      .setIssuedAt(now).setNotBefore(now).setExpirationTime(now + 600).setJti(crypto.randomUUID())
      .sign(issuerKey.privateKey)
  }
  const dir = t.testdir({ token: await projected() })
  const api = await resourceServer(t, realm.issuer, realm.jwksUrl)
  const sidecar = await spawnSidecar(t, api.url, '', '', {
    AUTH_ISSUER_URL: realm.issuer,
    AUTH_GRANT_TYPE: 'client_credentials',
    AUTH_CLIENT_ID: 'workload',
    AUTH_CLIENT_AUTH: 'federated_jwt',
    AUTH_CLIENT_ASSERTION_FILE: join(dir, 'token'),
    AUTH_USERNAME: '',
    AUTH_PASSWORD: ''
  })
  await untilReady(sidecar)
  t.equal((await send(`${sidecar.proxyUrl}/a`)).status, 200)
  t.equal(api.verdicts.at(-1)!.claims?.azp, 'workload', 'a token of the federated client')

  replace(join(dir, 'token'), await projected())
  const grantsBefore = sidecar.run.stdout.filter((l) => l.includes('"grant":"client_credentials"') && l.includes('"outcome":"success"')).length
  await until(() => sidecar.run.stdout.filter((l) => l.includes('"grant":"client_credentials"') && l.includes('"outcome":"success"')).length >= grantsBefore + 2, 15_000)
  t.equal((await send(`${sidecar.proxyUrl}/b`)).status, 200, 'served with tokens obtained with the replaced file')
  const logins = await realm.events(['CLIENT_LOGIN', 'CLIENT_LOGIN_ERROR'])
  t.ok(logins.length >= 3, `${logins.length} client_credentials grants`)
  t.same(logins.filter((e) => e.type === 'CLIENT_LOGIN_ERROR'), [], 'none refused')
  t.ok((issuer.hits['/openid/v1/jwks'] ?? 0) >= 1, 'Keycloak checked the tokens against the stand-in issuer\'s keys')
  t.notMatch(sidecar.run.stdout.join('\n'), /eyJ/, 'no token or assertion in the log')
})
