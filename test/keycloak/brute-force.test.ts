import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { send, until } from '../helpers/build.js'
import { keycloakTest } from '../helpers/keycloak.js'
import { spawnSidecar } from '../helpers/process.js'
import { resourceServer } from '../helpers/resource-server.js'

/**
 * The pace of rejected attempts (a minute by default; shorter here, so that
 * the run is), and the attempts the test waits for: one under the realm's
 * lockout threshold.
 */
const RETRY_MS = 10_000
const ATTEMPTS = 3
/** The shortest gap between two attempts: the pace, less its jitter (a tenth) and a margin. */
const SHORTEST_GAP_MS = 0.85 * RETRY_MS

keycloakTest(`a wrong password left running for ${ATTEMPTS} attempts does not lock the account, one every ${RETRY_MS / 1000} s; the right one, written to the file, is tried at once`, async (t, kc) => {
  // brute-force detection locks the user after 4 failures
  const realm = await kc.root.realm(t, { failureFactor: 4 })
  const api = await resourceServer(t, realm.issuer, realm.jwksUrl)
  const dir = t.testdir({ password: 'a-wrong-password\n' })
  const sidecar = await spawnSidecar(t, api.url, '', '', {
    AUTH_ISSUER_URL: realm.issuer,
    AUTH_CLIENT_SECRET: 'legacy-app-secret-8f2d',
    AUTH_PASSWORD: '',
    AUTH_PASSWORD_FILE: join(dir, 'password'),
    TOKEN_REJECTED_RETRY_MS: String(RETRY_MS)
  })
  const rejected = (): string[] => sidecar.run.stdout.filter((l) => l.includes('credentials rejected by the auth server'))
  await until(() => rejected().length >= ATTEMPTS, ATTEMPTS * RETRY_MS * 1.1 + 15_000)
  const lastRejection = Date.now()
  t.equal((await send(`${sidecar.proxyUrl}/r`)).status, 503, 'no token meanwhile: 503')

  const failures = await realm.events(['LOGIN_ERROR'])
  t.equal(failures.length, ATTEMPTS, `${ATTEMPTS} failed logins recorded by Keycloak`)
  const gaps = failures.slice(1).map((e, i) => e.time - failures[i]!.time)
  t.ok(gaps.every((gap) => gap >= SHORTEST_GAP_MS), `paced: Keycloak recorded them ${gaps.map((gap) => (gap / 1000).toFixed(1)).join(' s and ')} s apart`)
  const record = await realm.bruteForce('service-user')
  t.equal(record.disabled, false, 'the account is not locked')
  t.equal(record.numFailures, ATTEMPTS)
  t.equal(rejected().length, ATTEMPTS, 'each attempt logged at error, with Keycloak\'s reason')
  t.match(rejected()[0], /"level":50.*invalid_grant \(Invalid user credentials\)/)

  writeFileSync(join(dir, 'password'), 'service-user-password-5e1f\n')
  const obtained = await until(() => sidecar.run.stdout.some((l) => l.includes('"token obtained')), lastRejection + SHORTEST_GAP_MS - Date.now()).then(() => true, () => false)
  t.ok(obtained, 'the new password tried at once: a token before the next paced attempt was due')
  t.equal((await send(`${sidecar.proxyUrl}/r`)).status, 200, 'the new password is used without a restart')
  t.notMatch(sidecar.run.stdout.join('\n'), /a-wrong-password|service-user-password-5e1f/)
}, { timeout: 180_000 })
