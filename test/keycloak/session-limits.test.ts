import type { Test } from 'tap'
import { send } from '../helpers/build.js'
import { keycloakTest, type KeycloakEvent, type Realm } from '../helpers/keycloak.js'
import { spawnSidecar, traffic, untilReady, type SpawnedSidecar } from '../helpers/process.js'
import { resourceServer } from '../helpers/resource-server.js'

const PASSWORD = 'service-user-password-5e1f'

async function sidecarFor (t: Test, realm: Realm): Promise<SpawnedSidecar> {
  const api = await resourceServer(t, realm.issuer, realm.jwksUrl)
  const sidecar = await spawnSidecar(t, api.url, '', PASSWORD, { AUTH_ISSUER_URL: realm.issuer, AUTH_CLIENT_SECRET: 'legacy-app-secret-8f2d' })
  await untilReady(sidecar)
  return sidecar
}

keycloakTest('SSO Session Max shorter than the run: one password grant when the session runs out, no request fails', async (t, kc) => {
  const realm = await kc.root.realm(t, { accessTokenLifespan: 6, ssoSessionMaxLifespan: 14 })
  const sidecar = await sidecarFor(t, realm)
  // Requests every 200 ms, and Keycloak's count of the user's sessions every
  // two seconds, until Keycloak's own records show the session's end passed:
  // a second LOGIN, a refresh in the new session, the old one gone. The new
  // session is opened before the old one lapses, so at a boundary there may
  // be two for a moment, or none: never more, and one the rest of the time.
  const sessionCounts: number[] = []
  let events: KeycloakEvent[] = []
  const passed = (): boolean => {
    const second = events.filter((e) => e.type === 'LOGIN')[1]
    return second !== undefined && events.slice(events.indexOf(second)).some((e) => e.type === 'REFRESH_TOKEN') &&
      sessionCounts.at(-1) === 1 && sessionCounts.length >= 6
  }
  const bound = Date.now() + 120_000
  let over = false
  const sampling = (async () => {
    while (!over) {
      events = await realm.events(['LOGIN', 'LOGIN_ERROR', 'REFRESH_TOKEN', 'REFRESH_TOKEN_ERROR'])
      sessionCounts.push((await realm.sessions('service-user')).length)
      over = passed() || Date.now() > bound
      if (!over) await new Promise((resolve) => setTimeout(resolve, 2_000))
    }
  })()
  const statuses: number[] = []
  try {
    while (!over) {
      statuses.push((await send(`${sidecar.proxyUrl}/r`)).status)
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
  } finally {
    over = true
    await sampling
  }
  t.ok(passed(), `Keycloak recorded the session's end and the new session in use (${events.map((e) => e.type).join(' ')}; sessions ${sessionCounts.join(' ')})`)
  t.same([...new Set(statuses)], [200], `${statuses.length} requests, every one 200`)
  // what the sidecar met, should a request have failed
  if (statuses.some((s) => s !== 200)) t.comment(sidecar.run.stdout.filter((l) => l.includes('"event":"token"') && !l.includes('"level":20')).join('\n'))
  t.equal(events.filter((e) => e.type === 'LOGIN').length, 2, 'the password grant at start, and once more for the new session')
  t.ok(events.filter((e) => e.type === 'REFRESH_TOKEN').length >= 3, 'refresh grants in between')
  t.ok(events.filter((e) => e.type === 'REFRESH_TOKEN_ERROR').length <= 1, 'at most the one refresh that met the end of the session')
  // a sample every two seconds: at least six, or the check below says nothing
  t.ok(sessionCounts.length >= 6, `${sessionCounts.length} counts of the user's sessions`)
  t.ok(Math.max(...sessionCounts) <= 2 && sessionCounts.filter((n) => n === 1).length >= sessionCounts.length - 2, `one session at a time (${sessionCounts.join(' ')})`)
})

keycloakTest('a session ended in Keycloak ("Session not active"): the refresh is refused once, one password grant follows, no request fails', async (t, kc) => {
  const realm = await kc.root.realm(t, { accessTokenLifespan: 6 })
  const sidecar = await sidecarFor(t, realm)
  let ended = false
  const statuses = await traffic(sidecar, 16, {
    during: async (elapsed) => {
      if (ended || elapsed < 5_000) return
      ended = true
      await realm.api('POST', `/users/${await realm.userId('service-user')}/logout`)
    }
  })
  t.same([...new Set(statuses)], [200], `${statuses.length} requests, every one 200`)
  const events = await realm.events(['LOGIN', 'REFRESH_TOKEN_ERROR'])
  t.same(events.map((e) => e.type), ['LOGIN', 'REFRESH_TOKEN_ERROR', 'LOGIN'], 'refused once, then one password grant')
  t.ok(sidecar.run.stdout.some((l) => l.includes('Session not active') && l.includes('falling back to the password grant')), 'the log says why')
})

keycloakTest('offline_access: refresh_expires_in 0 is no lapse, refreshes outlive SSO Session Max, the offline session ends on shutdown', async (t, kc) => {
  const realm = await kc.root.realm(t, { accessTokenLifespan: 4, ssoSessionMaxLifespan: 8 })
  const api = await resourceServer(t, realm.issuer, realm.jwksUrl)
  const sidecar = await spawnSidecar(t, api.url, '', PASSWORD, { AUTH_ISSUER_URL: realm.issuer, AUTH_CLIENT_SECRET: 'legacy-app-secret-8f2d', AUTH_SCOPE: 'openid offline_access' })
  await untilReady(sidecar)
  const statuses = await traffic(sidecar, 14)
  t.same([...new Set(statuses)], [200], `${statuses.length} requests over 14 s, past the 8 s SSO Session Max, every one 200`)
  const grants = sidecar.run.stdout.filter((l) => l.includes('"event":"token"') && l.includes('"outcome":"success"')).map((l) => JSON.parse(l) as { grant: string, refreshExpiresIn: number })
  t.equal(grants[0]?.refreshExpiresIn, 0, 'Keycloak said refresh_expires_in 0')
  t.same([...new Set(grants.slice(1).map((g) => g.grant))], ['refresh_token'], `${grants.length - 1} renewals, every one a refresh grant`)
  t.equal((await realm.events(['LOGIN'])).length, 1, 'one password grant')
  t.equal((await realm.sessions('service-user', true)).length, 1, 'an offline session')

  sidecar.run.child.kill('SIGTERM')
  t.equal(await sidecar.run.exited, 0)
  t.same(await realm.sessions('service-user', true), [], 'the offline session ended')
})
