import { existsSync, readFileSync } from 'node:fs'
import t from 'tap'
import { parse } from 'yaml'
import { root } from '../helpers/process.js'

interface Service {
  image?: string
  build?: string
  command?: string[]
  environment?: Record<string, string>
  volumes?: string[]
  ports?: string[]
  depends_on?: Record<string, { condition: string }>
  healthcheck?: { test: string[] }
  read_only?: boolean
  cap_drop?: string[]
}

const compose = parse(readFileSync(`${root}docker-compose.yml`, 'utf8')) as { services: Record<string, Service> }
const { keycloak, api, sidecar } = compose.services as Record<'keycloak' | 'api' | 'sidecar', Service>
const realmFile = keycloak!.volumes![0]!.split(':')[0]!.replace(/^\.\//, '')
const realm = JSON.parse(readFileSync(`${root}${realmFile}`, 'utf8')) as {
  realm: string
  enabled: boolean
  accessTokenLifespan: number
  clients: Array<{ clientId: string, secret?: string, publicClient: boolean, directAccessGrantsEnabled: boolean, enabled: boolean }>
  users: Array<{ username: string, enabled: boolean, requiredActions: string[], email?: string, firstName?: string, lastName?: string, emailVerified?: boolean, credentials: Array<{ type: string, value: string, temporary: boolean }> }>
}

t.test('Keycloak: a pinned current image, start-dev under /auth, the realm imported, a health check', async (t) => {
  t.match(keycloak!.image, /^quay\.io\/keycloak\/keycloak:\d+\.\d+\.\d+$/, 'pinned to an exact version')
  t.ok(Number(/:(\d+)\./.exec(keycloak!.image!)![1]) >= 26, 'a current major')
  t.equal(keycloak!.command![0], 'start-dev')
  t.ok(keycloak!.command!.includes('--import-realm'))
  t.equal(keycloak!.environment!.KC_HTTP_RELATIVE_PATH, '/auth', 'the legacy token path, with /auth')
  t.match(keycloak!.volumes![0], /:\/opt\/keycloak\/data\/import\/[^:]+\.json:ro$/)
  t.ok(existsSync(`${root}${realmFile}`), 'the realm file is in the repository')
  t.match(keycloak!.healthcheck!.test.join(' '), /health\/ready/)
})

t.test('compose, the README and the chart\'s README name the Keycloak version the tests run against (scripts/keycloak.mjs)', async (t) => {
  const { KEYCLOAK_VERSION } = await import(`${root}scripts/keycloak.mjs`) as { KEYCLOAK_VERSION: string }
  t.equal(keycloak!.image, `quay.io/keycloak/keycloak:${KEYCLOAK_VERSION}`)
  for (const file of ['README.md', 'helm/auth-sidecar/README.md']) {
    t.match(readFileSync(`${root}${file}`, 'utf8').replace(/\s+/g, ' '), new RegExp(`Keycloak \\(?${KEYCLOAK_VERSION.replace(/\./g, '\\.')}\\b`), file)
  }
})

t.test('the realm: service-realm, a client with direct access grants, a ready service user, short lifetimes', async (t) => {
  t.equal(realm.realm, 'service-realm')
  t.equal(realm.enabled, true)
  t.ok(realm.accessTokenLifespan <= 120, `tokens live ${realm.accessTokenLifespan} s: renewals can be watched`)
  const client = realm.clients.find((c) => c.clientId === sidecar!.environment!.AUTH_CLIENT_ID)
  t.ok(client, 'the sidecar\'s client exists')
  t.equal(client!.enabled, true)
  t.equal(client!.directAccessGrantsEnabled, true, 'password grant allowed')
  if (!client!.publicClient) t.equal(client!.secret, sidecar!.environment!.AUTH_CLIENT_SECRET, 'the sidecar has the client secret')
  const user = realm.users.find((u) => u.username === sidecar!.environment!.AUTH_USERNAME)
  t.ok(user, 'the sidecar\'s user exists')
  t.equal(user!.enabled, true)
  t.same(user!.requiredActions, [], 'no pending required actions')
  t.ok(user!.email && user!.firstName && user!.lastName && user!.emailVerified, 'profile complete: no "Account is not fully set up"')
  t.same(user!.credentials.map((c) => [c.type, c.value, c.temporary]), [['password', sidecar!.environment!.AUTH_PASSWORD, false]])
})

t.test('the sidecar: built from the Dockerfile, wired to Keycloak and the API, after Keycloak is healthy', async (t) => {
  t.equal(sidecar!.build, '.')
  t.equal(sidecar!.environment!.AUTH_URL, 'http://keycloak:8080')
  t.equal(sidecar!.environment!.AUTH_REALM, realm.realm)
  t.equal(sidecar!.environment!.BASE_URL, 'http://api:3000')
  t.equal(sidecar!.depends_on!.keycloak!.condition, 'service_healthy')
  t.ok(sidecar!.ports!.every((p) => p.startsWith('127.0.0.1:')), 'published on the host\'s loopback only')
  t.ok(sidecar!.ports!.some((p) => p.endsWith(':8080')))
  t.equal(sidecar!.read_only, true)
  t.same(sidecar!.cap_drop, ['ALL'])
})

t.test('the example API verifies tokens of that realm, from the repository', async (t) => {
  t.equal(api!.build, './deploy/example-api')
  t.equal(api!.environment!.ISSUER, `http://keycloak:8080/auth/realms/${realm.realm}`)
  const pkg = JSON.parse(readFileSync(`${root}deploy/example-api/package.json`, 'utf8')) as { dependencies: Record<string, string> }
  t.ok(pkg.dependencies.jose, 'a well-kept JWT library')
  t.ok(existsSync(`${root}deploy/example-api/package-lock.json`))
})
