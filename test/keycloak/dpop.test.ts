import { send, until } from '../helpers/build.js'
import { keycloakTest, type Realm } from '../helpers/keycloak.js'
import { root, spawnSidecar, start, traffic, untilReady } from '../helpers/process.js'

const SECRET = 'legacy-app-secret-8f2d'
const PASSWORD = 'service-user-password-5e1f'

/** A realm whose legacy-app has "Require DPoP bound tokens" on. */
async function dpopRealm (t: Parameters<Parameters<typeof keycloakTest>[1]>[0], kc: Parameters<Parameters<typeof keycloakTest>[1]>[1], changes: Record<string, unknown> = {}): Promise<Realm> {
  const realm = await kc.root.realm(t, changes)
  await realm.updateClient('legacy-app', { attributes: { 'dpop.bound.access.tokens': 'true' } })
  return realm
}

/**
 * The upstream is Keycloak's own userinfo endpoint, which takes a DPoP-bound
 * token only with a valid proof for it (and refuses a replayed one): the
 * sidecar's BASE_URL is the realm's openid-connect path, so that
 * `/userinfo` through the sidecar is that endpoint.
 */
const SETTINGS = (realm: Realm): Record<string, string> => ({
  AUTH_ISSUER_URL: realm.issuer,
  AUTH_CLIENT_SECRET: SECRET,
  AUTH_DPOP: 'true',
  // userinfo answers only tokens with the openid scope
  AUTH_SCOPE: 'openid'
})

keycloakTest('DPoP against Keycloak: bound tokens, renewed by the refresh grant, every request\'s proof accepted by its userinfo endpoint', async (t, kc) => {
  const realm = await dpopRealm(t, kc, { accessTokenLifespan: 4 })
  const sidecar = await spawnSidecar(t, `${realm.issuer}/protocol/openid-connect`, '', PASSWORD, SETTINGS(realm))
  await untilReady(sidecar)
  const statuses: number[] = []
  let caller: unknown
  for (let i = 0; i < 40; i++) {
    const answer = await send(`${sidecar.proxyUrl}/userinfo?attempt=${i}`, i % 2 === 0 ? {} : { headers: { dpop: 'a.client.proof' } })
    statuses.push(answer.status)
    if (answer.status === 200) caller = (JSON.parse(answer.body) as { preferred_username?: string }).preferred_username
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
  t.same([...new Set(statuses)], [200], 'every request accepted: a fresh proof each time, the client\'s own dropped')
  t.equal(caller, 'service-user')
  const refreshes = await realm.events(['REFRESH_TOKEN', 'REFRESH_TOKEN_ERROR'])
  t.ok(refreshes.length >= 2 && refreshes.every((e) => e.type === 'REFRESH_TOKEN'), `${refreshes.length} refresh grants with proofs, none refused`)
  t.equal((await realm.events(['LOGIN'])).length, 1, 'one password grant')
  t.equal((await realm.events(['USER_INFO_REQUEST_ERROR'])).length, 0, 'no proof refused by userinfo')

  sidecar.run.child.kill('SIGTERM')
  t.equal(await sidecar.run.exited, 0)
  t.same(await realm.sessions('service-user'), [], 'the session ended, the logout request proven')
  t.notMatch(sidecar.run.stdout.join('\n'), new RegExp(`${PASSWORD}|${SECRET}|eyJ`), 'no secret, token or proof logged')
})

keycloakTest('DPoP with a public client against Keycloak: its refresh tokens bound too, renewed with the sidecar\'s EdDSA proofs; the session ended on shutdown', async (t, kc) => {
  const realm = await kc.root.realm(t, { accessTokenLifespan: 3 })
  await realm.updateClient('public-app', { attributes: { 'dpop.bound.access.tokens': 'true' } })
  const sidecar = await spawnSidecar(t, `${realm.issuer}/protocol/openid-connect`, '', PASSWORD, {
    AUTH_ISSUER_URL: realm.issuer,
    AUTH_CLIENT_ID: 'public-app',
    AUTH_DPOP: 'true',
    AUTH_DPOP_ALG: 'EdDSA',
    AUTH_SCOPE: 'openid'
  })
  await untilReady(sidecar)
  const statuses = await traffic(sidecar, 6, { path: '/userinfo' })
  t.same([...new Set(statuses)], [200], `${statuses.length} requests, every proof accepted by userinfo`)
  const refreshes = await realm.events(['REFRESH_TOKEN', 'REFRESH_TOKEN_ERROR'])
  t.ok(refreshes.length >= 2 && refreshes.every((e) => e.type === 'REFRESH_TOKEN'), `${refreshes.length} refresh grants of bound refresh tokens, none refused`)
  t.equal((await realm.events(['LOGIN'])).length, 1, 'one password grant')

  sidecar.run.child.kill('SIGTERM')
  t.equal(await sidecar.run.exited, 0)
  t.same(await realm.sessions('service-user'), [], 'the session ended')
  t.match(sidecar.run.stdout.find((l) => l.includes('"event":"logout"')), /"outcome":"success"/)
  t.notMatch(sidecar.run.stdout.join('\n'), new RegExp(`${PASSWORD}|eyJ`), 'no password, token or proof logged')
})

keycloakTest('check with a public client and each RSA proof algorithm against Keycloak: bound tokens, proofs accepted, the session ended', async (t, kc) => {
  const realm = await kc.root.realm(t)
  await realm.updateClient('public-app', { attributes: { 'dpop.bound.access.tokens': 'true' } })
  for (const alg of ['RS256', 'PS256']) {
    const run = start({
      BASE_URL: `${realm.issuer}/protocol/openid-connect`,
      AUTH_ISSUER_URL: realm.issuer,
      AUTH_CLIENT_ID: 'public-app',
      AUTH_USERNAME: 'service-user',
      AUTH_PASSWORD: PASSWORD,
      AUTH_DPOP: 'true',
      AUTH_DPOP_ALG: alg,
      AUTH_SCOPE: 'openid'
    }, root, ['check', '--path', '/userinfo'])
    const code = await run.exited
    const output = run.stdout.join('\n')
    t.equal(code, 0, output)
    t.match(output, new RegExp(`ok {3}grant: .*; token_type DPoP, bound to the sidecar's ${alg} key [A-Za-z0-9_-]{43}, its cnf\\.jkt names it`))
    t.match(output, /ok {3}upstream: GET \S+\/userinfo answered 200 in \d+ ms: reached, DPoP-bound token and proof accepted/)
    t.match(output, /ok {3}session: session ended/)
    t.same(await realm.sessions('service-user'), [], `${alg}: no session left`)
  }
})

keycloakTest('a client that requires DPoP and a sidecar without AUTH_DPOP: Keycloak\'s refusal, and what to set', async (t, kc) => {
  const realm = await dpopRealm(t, kc)
  const { AUTH_DPOP: _, ...bearer } = SETTINGS(realm)
  const sidecar = await spawnSidecar(t, `${realm.issuer}/protocol/openid-connect`, '', PASSWORD, bearer)
  const failed = (): string | undefined => sidecar.run.stdout.find((l) => l.includes('token request failed'))
  await until(() => failed() !== undefined, 10_000)
  t.match(failed(), /400 invalid_request \(DPoP proof is missing\): the client requires DPoP-bound tokens; set AUTH_DPOP=true/)
  t.equal((await send(`${sidecar.adminUrl}/readyz`)).status, 503)
})

keycloakTest('check in DPoP mode against Keycloak: token_type DPoP, cnf.jkt names the sidecar\'s key, the userinfo endpoint accepts the proof', async (t, kc) => {
  const realm = await dpopRealm(t, kc)
  const run = start({
    BASE_URL: `${realm.issuer}/protocol/openid-connect`,
    AUTH_CLIENT_ID: 'legacy-app',
    AUTH_USERNAME: 'service-user',
    AUTH_PASSWORD: PASSWORD,
    ...SETTINGS(realm)
  }, root, ['check', '--path', '/userinfo'])
  const code = await run.exited
  const output = run.stdout.join('\n')
  t.equal(code, 0, output)
  t.match(output, /ok {3}grant: .*; token_type DPoP, bound to the sidecar's ES256 key [A-Za-z0-9_-]{43}, its cnf\.jkt names it/)
  t.match(output, /ok {3}upstream: GET \S+\/protocol\/openid-connect\/userinfo answered 200 in \d+ ms: reached, DPoP-bound token and proof accepted/)
  t.same(await realm.sessions('service-user'), [])
  t.notMatch(output, /eyJ/)
})
