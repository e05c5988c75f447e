import t, { type Test } from 'tap'
import { CHECK_EXIT, runCheck } from '../../src/check/run.js'
import { join } from 'node:path'
import { loadConfig, type CredentialConfig } from '../../src/config/load.js'
import { inTheirNames } from '../../src/config/names.js'
import { fakeServers } from '../helpers/process.js'

const PASSWORD = 'advice-password-5d4c3b'
const SECRET = 'advice-client-secret-8h9i'

/** check's output for a default route that works and a route billing with `billing`'s settings. */
async function check (t: Test, billing: (tokenServerUrl: string) => Record<string, string>): Promise<{ code: number, output: string, line: (prefix: string) => string | undefined }> {
  const { tokenServer, upstream } = await fakeServers(t, { clients: { 'legacy-app': SECRET }, users: { 'service-user': PASSWORD } })
  const env = {
    BASE_URL: `${upstream.url}/api`,
    AUTH_URL: tokenServer.url,
    AUTH_CLIENT_ID: 'legacy-app',
    AUTH_CLIENT_SECRET: SECRET,
    AUTH_USERNAME: 'service-user',
    AUTH_PASSWORD: PASSWORD,
    ROUTE_BILLING_BASE_URL: `${upstream.url}/billing`,
    ROUTE_BILLING_PATH: '/billing',
    ...billing(tokenServer.url)
  }
  let output = ''
  const code = await runCheck(env, [], (text) => { output += text }, '/nonexistent')
  return { code, output, line: (prefix) => output.split('\n').find((l) => l.startsWith(prefix)) }
}

t.test('check advises on a failed discovery from the settings of the credential that failed, not the default route\'s', async (t) => {
  // the default route's token URL comes from AUTH_URL; route billing's from the discovery of an issuer that is not one
  const { code, output, line } = await check(t, (url) => ({
    ROUTE_BILLING_AUTH_ISSUER_URL: `${url}/realms/nowhere`,
    ROUTE_BILLING_AUTH_CLIENT_SECRET: SECRET,
    ROUTE_BILLING_AUTH_PASSWORD: PASSWORD
  }))
  t.equal(code, CHECK_EXIT.discovery, output)
  t.match(output, /^ok {3}grant \(route default\): password grant at /m, 'the default route\'s credential is fine')
  const failed = line('FAIL discovery (route billing): ')
  t.ok(failed, 'route billing\'s discovery fails')
  t.match(failed, /is not an OpenID Connect issuer/, 'the discovery failure says what is wrong')
  t.notMatch(failed, /Check AUTH_URL and AUTH_REALM/, 'and is not taken for a wrong token URL, which the default route\'s settings would suggest')
})

t.test('check tells a named route to change its own variables, and the default route\'s where it takes those', async (t) => {
  // route billing sets its own client, and takes the default route's auth server and user
  const { code, output, line } = await check(t, () => ({ ROUTE_BILLING_AUTH_CLIENT_ID: 'billing-app', ROUTE_BILLING_AUTH_CLIENT_SECRET: 'billing-secret' }))
  t.equal(code, CHECK_EXIT.grant, output)
  t.match(output, /^ok {3}grant \(route default\): /m, 'the default route\'s credential is fine')
  const failed = line('FAIL grant (route billing): ')
  t.ok(failed, 'route billing\'s grant is refused')
  t.match(failed, /ROUTE_BILLING_AUTH_CLIENT_ID/, 'the hint names the route\'s own client id')
  t.match(failed, /ROUTE_BILLING_AUTH_CLIENT_SECRET\b/, 'and its own secret')
  t.notMatch(failed, /(?<!ROUTE_BILLING_)AUTH_CLIENT_(ID|SECRET)\b/, 'not the default route\'s')
  t.match(failed, /and AUTH_CLIENT_AUTH \(/, 'what it takes from the default route keeps the default route\'s name')
})

t.test('a text names the variables a route set, their _FILE twins, and the default route\'s for the rest', async (t) => {
  const dir = t.testdir({ password: 'route-password-1f2e', 'default-password': 'default-password-3c4d' })
  const env = {
    BASE_URL: 'http://127.0.0.1:9/api',
    AUTH_URL: 'http://127.0.0.1:9',
    AUTH_CLIENT_ID: 'legacy-app',
    AUTH_CLIENT_SECRET: SECRET,
    AUTH_USERNAME: 'service-user',
    ROUTE_BILLING_BASE_URL: 'http://127.0.0.1:9/billing',
    ROUTE_BILLING_PATH: '/billing',
    ROUTE_BILLING_AUTH_CLIENT_ID: 'billing-app',
    ROUTE_BILLING_AUTH_PASSWORD_FILE: join(dir, 'password'),
    ROUTE_BILLING_AUTH_SCOPE: 'billing'
  }
  const credentialOf = (more: Record<string, string>): CredentialConfig => loadConfig({ ...env, ...more }, { cwd: dir }).routes.find((r) => r.name === 'billing')!.credential
  const { setBy } = credentialOf({ AUTH_PASSWORD_FILE: join(dir, 'password') })
  t.equal(inTheirNames('Check AUTH_CLIENT_ID and AUTH_CLIENT_SECRET', setBy), 'Check ROUTE_BILLING_AUTH_CLIENT_ID and AUTH_CLIENT_SECRET')
  t.equal(inTheirNames('AUTH_SCOPE_X is not AUTH_SCOPE', setBy), 'AUTH_SCOPE_X is not ROUTE_BILLING_AUTH_SCOPE')
  t.equal(inTheirNames('ROUTE_BILLING_AUTH_TLS_CA_FILE stays as it is', setBy), 'ROUTE_BILLING_AUTH_TLS_CA_FILE stays as it is')
  t.equal(inTheirNames('AUTH_PASSWORD_FILE', setBy), 'AUTH_PASSWORD_FILE', 'a setting the route gives the default route\'s value keeps the default route\'s name')
  t.equal(inTheirNames('Check AUTH_USERNAME and AUTH_PASSWORD (or their files)', credentialOf({ AUTH_PASSWORD_FILE: join(dir, 'default-password') }).setBy), 'Check AUTH_USERNAME and ROUTE_BILLING_AUTH_PASSWORD (or their files)', 'a file of its own names its twin too')
  t.throws(() => credentialOf({ AUTH_PASSWORD: 'default-password-9a' }), { message: /AUTH_PASSWORD and ROUTE_BILLING_AUTH_PASSWORD_FILE are both set/ }, 'but not a twin the default route sets')
  t.equal(inTheirNames('AUTH_CLIENT_ID', undefined), 'AUTH_CLIENT_ID', 'the default route\'s credential names its own')
})
