import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { send, until } from '../helpers/build.js'
import { keycloakTest } from '../helpers/keycloak.js'
import { spawnSidecar } from '../helpers/process.js'
import { resourceServer } from '../helpers/resource-server.js'

/**
 * The pace of rejected attempts (a minute by default; shorter here, so that
 * the run is), and a run long enough for three attempts: one under the
 * realm's lockout threshold.
 */
const RETRY_SECONDS = 20
const RUN_SECONDS = 50

keycloakTest(`a wrong password left running for ${RUN_SECONDS} s does not lock the account; the right one, written to the file, is tried at once`, async (t, kc) => {
  // brute-force detection locks the user after 4 failures
  const realm = await kc.root.realm(t, { failureFactor: 4 })
  const api = await resourceServer(t, realm.issuer, realm.jwksUrl)
  const dir = t.testdir({ password: 'a-wrong-password\n' })
  const sidecar = await spawnSidecar(t, api.url, '', '', {
    AUTH_ISSUER_URL: realm.issuer,
    AUTH_CLIENT_SECRET: 'legacy-app-secret-8f2d',
    AUTH_PASSWORD: '',
    AUTH_PASSWORD_FILE: join(dir, 'password'),
    TOKEN_REJECTED_RETRY_MS: String(RETRY_SECONDS * 1000)
  })
  await new Promise((resolve) => setTimeout(resolve, RUN_SECONDS * 1000))
  t.equal((await send(`${sidecar.proxyUrl}/r`)).status, 503, 'no token meanwhile: 503')

  const failures = (await realm.events(['LOGIN_ERROR'])).length
  t.ok(failures >= 2 && failures <= 3, `${failures} failed logins recorded by Keycloak in ${RUN_SECONDS} s: one every ${RETRY_SECONDS} s`)
  const record = await realm.bruteForce('service-user')
  t.equal(record.disabled, false, 'the account is not locked')
  t.equal(record.numFailures, failures)
  const rejected = sidecar.run.stdout.filter((l) => l.includes('credentials rejected by the auth server'))
  t.equal(rejected.length, failures, 'each attempt logged at error, with Keycloak\'s reason')
  t.match(rejected[0], /"level":50.*invalid_grant \(Invalid user credentials\)/)

  writeFileSync(join(dir, 'password'), 'service-user-password-5e1f\n')
  await until(() => sidecar.run.stdout.some((l) => l.includes('"token obtained')), 10_000)
  t.equal((await send(`${sidecar.proxyUrl}/r`)).status, 200, 'the new password is used without a restart')
  t.notMatch(sidecar.run.stdout.join('\n'), /a-wrong-password|service-user-password-5e1f/)
}, { timeout: 180_000 })
