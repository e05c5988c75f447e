import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import { renameSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { calculateJwkThumbprint, exportJWK, SignJWT, type JWK } from 'jose'
import type { Test } from 'tap'
import { send, until } from '../helpers/build.js'
import { keycloakTest, type KeycloakEvent } from '../helpers/keycloak.js'
import { spawnSidecar, untilReady } from '../helpers/process.js'
import { resourceServer } from '../helpers/resource-server.js'

/** As the kubelet replaces a mounted file: a new file renamed into place. */
function replace (file: string, text: string): void {
  writeFileSync(`${file}.new`, text)
  renameSync(`${file}.new`, file)
}

/** A loopback server for JSON documents whose content the test changes; counts the requests per path, and keeps the last one's time. */
async function jsonServer (t: Test, documents: Record<string, unknown>): Promise<{ url: string, hits: Record<string, number>, lastHit: Record<string, number> }> {
  const hits: Record<string, number> = {}
  const lastHit: Record<string, number> = {}
  const server = createServer((req, res) => {
    const path = req.url ?? ''
    hits[path] = (hits[path] ?? 0) + 1
    lastHit[path] = Date.now()
    const body = documents[path]
    res.writeHead(body === undefined ? 404 : 200, { 'content-type': 'application/json' })
    res.end(JSON.stringify(body ?? { error: 'not found' }))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, hits, lastHit }
}

/**
 * Keycloak fetches a client's JWKS again, for a kid it does not know, only
 * when more than 10 s passed since its last fetch, counted in whole seconds:
 * up to 11 s after it.
 */
const JWKS_REFETCH_MS = 11_000

/** The refresh grants the sidecar logged as succeeded. */
const refreshes = (stdout: string[]): number => stdout.filter((l) => l.includes('"grant":"refresh_token"') && l.includes('"outcome":"success"')).length

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
  // until Keycloak may fetch the JWKS again: the new kid is then looked up, not refused from its cache
  const refetchFrom = (jwks.lastHit['/jwks'] ?? Date.now()) + JWKS_REFETCH_MS + 500
  await new Promise((resolve) => setTimeout(resolve, refetchFrom - Date.now()))
  const fetchesBefore = jwks.hits['/jwks'] ?? 0
  const refreshesBefore = refreshes(sidecar.run.stdout)
  const replacedAt = Date.now()
  replace(join(dir, 'client.pem'), second.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string)
  const events = async (): Promise<KeycloakEvent[]> => await realm.events(['LOGIN', 'LOGIN_ERROR', 'REFRESH_TOKEN', 'REFRESH_TOKEN_ERROR'])
  // requests flow until a refresh signed with the new key went through: one
  // that succeeded after Keycloak fetched the JWKS for the new kid
  const statuses: number[] = []
  const deadline = Date.now() + 25_000
  let refreshesAtRefetch: number | undefined
  while (Date.now() < deadline) {
    statuses.push((await send(`${sidecar.proxyUrl}/b`)).status)
    if (refreshesAtRefetch === undefined && (jwks.hits['/jwks'] ?? 0) > fetchesBefore) refreshesAtRefetch = refreshes(sidecar.run.stdout)
    if (refreshesAtRefetch !== undefined && refreshes(sidecar.run.stdout) > refreshesAtRefetch) break
    await new Promise((resolve) => setTimeout(resolve, 300))
  }
  t.same([...new Set(statuses)], [200], 'every request served across the rotation')
  t.ok((jwks.hits['/jwks'] ?? 0) > fetchesBefore, 'Keycloak fetched the JWKS again for the new kid')
  t.ok(refreshes(sidecar.run.stdout) > refreshesBefore, 'refreshed with the new key')
  const recorded = await events()
  t.same(recorded.filter((e) => e.type.endsWith('_ERROR')).map((e) => e.type), [], 'no grant refused')
  const refreshed = recorded.filter((e) => e.type === 'REFRESH_TOKEN')
  t.ok(refreshed.some((e) => e.time < replacedAt) && refreshed.some((e) => e.time > replacedAt), 'refreshes before and after the rotation')

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
