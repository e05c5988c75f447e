import { send } from '../helpers/build.js'
import { keycloakTest, type KeycloakServer } from '../helpers/keycloak.js'
import { spawnSidecar, traffic, untilReady, untilToken } from '../helpers/process.js'
import { resourceServer } from '../helpers/resource-server.js'
import type { Test } from 'tap'

const PASSWORD = 'service-user-password-5e1f'
const CLIENT_SECRET = 'legacy-app-secret-8f2d'
/** Access tokens live this long: a renewal every 3 to 4.5 s. */
const ACCESS_SECONDS = 6
const RUN_SECONDS = 16

/**
 * The built sidecar against one layout of the real Keycloak, given only
 * AUTH_URL and AUTH_REALM as a user would: requests every 200 ms through
 * several renewals, then SIGTERM.
 */
async function renewalsThenShutdown (t: Test, server: KeycloakServer): Promise<void> {
  const realm = await server.realm(t, { accessTokenLifespan: ACCESS_SECONDS })
  const api = await resourceServer(t, realm.issuer, realm.jwksUrl)
  const base = server.url.replace(/\/auth$/, '')
  const sidecar = await spawnSidecar(t, `${api.url}/v1`, base, PASSWORD, { AUTH_REALM: realm.name, AUTH_CLIENT_SECRET: CLIENT_SECRET })
  await untilReady(sidecar)

  t.same((await realm.sessions('service-user')).length, 1, 'one Keycloak session once the sidecar is ready')
  const statuses = await traffic(sidecar, RUN_SECONDS, { path: '/orders?page=1' })
  t.same([...new Set(statuses)], [200], `${statuses.length} requests, every one 200`)

  // what the resource server saw: only valid tokens of the realm, several of them
  t.ok(api.verdicts.length >= statuses.length && api.verdicts.every((v) => v.ok), 'every token the upstream got passed its check against the realm\'s JWKS')
  t.equal(api.verdicts[0]!.path, '/v1/orders?page=1', 'BASE_URL\'s path kept, the query unchanged')
  const tokens = new Set(api.verdicts.map((v) => v.token))
  t.ok(tokens.size >= 3, `${tokens.size} access tokens over ${RUN_SECONDS} s`)
  t.same(new Set(api.verdicts.map((v) => v.claims?.preferred_username)), new Set(['service-user']))

  // what Keycloak recorded: one login, then only refreshes, each refresh token used once
  const events = await realm.events(['LOGIN', 'LOGIN_ERROR', 'REFRESH_TOKEN', 'REFRESH_TOKEN_ERROR'])
  t.equal(events.filter((e) => e.type === 'LOGIN').length, 1, 'one password grant')
  t.ok(events.filter((e) => e.type === 'REFRESH_TOKEN').length >= 2, `${events.filter((e) => e.type === 'REFRESH_TOKEN').length} refresh grants in a row`)
  t.same(events.filter((e) => e.type.endsWith('_ERROR')), [], 'no refused grant: no refresh token was used twice (rotation is on)')
  t.same((await realm.sessions('service-user')).length, 1, 'still one session: renewals do not open new ones')

  sidecar.run.child.kill('SIGTERM')
  t.equal(await sidecar.run.exited, 0, 'SIGTERM: exit 0')
  t.same(await realm.sessions('service-user'), [], 'no session left for the service user')
  t.equal((await realm.events(['LOGOUT'])).length, 1, 'Keycloak recorded the logout')

  const otherLayout = sidecar.run.stdout.some((l) => l.includes('the token endpoint answers at'))
  t.equal(otherLayout, server.layout === 'root', server.layout === 'root' ? 'the layout without /auth found, and the log says so' : 'the /auth layout used as derived')
  const output = sidecar.run.stdout.join('\n') + sidecar.run.stderr.join('')
  for (const secret of [PASSWORD, CLIENT_SECRET, ...tokens]) t.notOk(output.includes(secret!), 'no secret or token in the output')
  t.ok(sidecar.run.stdout.some((l) => l.includes('"event":"logout"') && l.includes('"outcome":"success"')))
}

keycloakTest('Keycloak with the legacy /auth path: the password grant, refresh grants in a row, one session, none after SIGTERM', async (t, kc) => {
  await renewalsThenShutdown(t, kc.auth)
})

keycloakTest('Keycloak 17+ at the root path, given the same AUTH_URL: the other layout is found and used, then the same', async (t, kc) => {
  await renewalsThenShutdown(t, kc.root)
})

keycloakTest('discovery through AUTH_ISSUER_URL finds the token and end-session endpoints', async (t, kc) => {
  const realm = await kc.root.realm(t)
  const api = await resourceServer(t, realm.issuer, realm.jwksUrl)
  const sidecar = await spawnSidecar(t, api.url, '', PASSWORD, { AUTH_ISSUER_URL: realm.issuer, AUTH_CLIENT_SECRET: CLIENT_SECRET })
  await untilReady(sidecar)
  await untilToken(sidecar.run)
  const discovered = sidecar.run.stdout.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.event === 'discovery')!
  t.equal(discovered.tokenUrl, realm.tokenUrl)
  t.equal(discovered.endSessionUrl, `${realm.issuer}/protocol/openid-connect/logout`)
  t.equal((await send(`${sidecar.proxyUrl}/x`)).status, 200)
  sidecar.run.child.kill('SIGTERM')
  t.equal(await sidecar.run.exited, 0)
  t.same(await realm.sessions('service-user'), [], 'the discovered end-session endpoint ended it')
})
