import type { Test } from 'tap'
import { keycloakTest, type Realm } from '../helpers/keycloak.js'
import { spawnSidecar, traffic, untilReady, type SpawnedSidecar } from '../helpers/process.js'
import { resourceServer } from '../helpers/resource-server.js'

const PASSWORD = 'service-user-password-5e1f'
const CLIENT_SECRET = 'legacy-app-secret-8f2d'
const SERVICE_SECRET = 'service-app-secret-3c7a'

// The run's `hostname` Keycloak is started with --hostname set to a public
// URL that never resolves here and a dynamic backchannel, as in most
// clusters: the sidecar dials it at a loopback address (a Service), while
// every issuer it names, in its tokens and its discovery document, is the
// public one.

/** How the sidecar finds the token endpoint: the internal token URL as given, or discovery fetched internally. */
const WAYS = {
  'a token URL': (realm: Realm) => ({ AUTH_TOKEN_URL: realm.tokenUrl }),
  discovery: (realm: Realm) => ({ AUTH_ISSUER_URL: realm.issuer, AUTH_DISCOVERY_URL: realm.address })
}

const GRANTS = {
  password: { AUTH_CLIENT_SECRET: CLIENT_SECRET },
  client_credentials: { AUTH_GRANT_TYPE: 'client_credentials', AUTH_CLIENT_ID: 'service-app', AUTH_CLIENT_SECRET: SERVICE_SECRET, AUTH_USERNAME: '', AUTH_PASSWORD: '' }
}

for (const [way, endpoint] of Object.entries(WAYS)) {
  for (const [grant, settings] of Object.entries(GRANTS)) {
    keycloakTest(`Keycloak reached by an internal address, its hostname public: ${grant} with ${way} and scope openid, ready and serving`, async (t, kc) => {
      const realm = await kc.hostname.realm(t, { accessTokenLifespan: 6 })
      t.notSame(new URL(realm.issuer).origin, new URL(realm.address).origin, 'the issuer is not the address dialled')
      const api = await resourceServer(t, realm.issuer, realm.jwksUrl)
      const sidecar = await spawnSidecar(t, api.url, '', PASSWORD, { ...endpoint(realm), ...settings, AUTH_SCOPE: 'openid' })
      await untilReady(sidecar, 15_000)
      const statuses = await traffic(sidecar, 5)
      t.same([...new Set(statuses)], [200], `${statuses.length} requests, every one 200`)
      t.ok(api.verdicts.every((v) => v.ok && v.claims?.iss === realm.issuer), 'the tokens are the public issuer\'s, and the API takes them')
      t.ok(new Set(api.verdicts.map((v) => v.token)).size >= 2, 'renewed while running')
      const failures = lines(sidecar).filter((l) => l.outcome === 'error' || l.outcome === 'rejected')
      t.same(failures, [], 'no grant failed')
      if (way === 'discovery') await discoveredInternally(t, sidecar, realm)
      await shutdown(t, sidecar, realm, grant === 'password')
    })
  }
}

function lines (sidecar: SpawnedSidecar): Array<Record<string, unknown>> {
  return sidecar.run.stdout.map((l) => JSON.parse(l) as Record<string, unknown>)
}

/** The document named the public issuer and the internal token endpoint (the dynamic backchannel); the others, public in it, are reached internally. */
async function discoveredInternally (t: Test, sidecar: SpawnedSidecar, realm: Realm): Promise<void> {
  const discovered = lines(sidecar).find((l) => l.event === 'discovery' && l.msg === 'discovered the realm\'s endpoints')!
  t.equal(discovered.issuer, realm.issuer, 'the issuer, checked: the public one')
  t.equal(discovered.discoveryUrl, `${realm.address}/.well-known/openid-configuration`, 'fetched at the internal address')
  t.equal(discovered.tokenUrl, realm.tokenUrl, 'the token endpoint as Keycloak lists it for the backchannel: internal')
  t.equal(discovered.endSessionUrl, `${realm.address}/protocol/openid-connect/logout`, 'the end-session endpoint, public in the document, reached internally')
}

async function shutdown (t: Test, sidecar: SpawnedSidecar, realm: Realm, session: boolean): Promise<void> {
  sidecar.run.child.kill('SIGTERM')
  t.equal(await sidecar.run.exited, 0)
  if (session) {
    t.same(await realm.sessions('service-user'), [], 'the session was ended')
    t.equal((await realm.events(['LOGOUT'])).length, 1, 'Keycloak recorded the logout')
  }
  const output = sidecar.run.stdout.join('\n')
  for (const secret of [PASSWORD, CLIENT_SECRET, SERVICE_SECRET]) t.notOk(output.includes(secret), 'no secret in the output')
}
