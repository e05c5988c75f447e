import t from 'tap'
import { CHECK_EXIT, runCheck } from '../../src/check/run.js'
import { fakeServers } from '../helpers/process.js'

const PASSWORD = 'advice-password-5d4c3b'
const SECRET = 'advice-client-secret-8h9i'

t.test('check advises on a failed discovery from the settings of the credential that failed, not the default route\'s', async (t) => {
  const { tokenServer, upstream } = await fakeServers(t, { clients: { 'legacy-app': SECRET }, users: { 'service-user': PASSWORD } })
  // the default route's token URL comes from AUTH_URL; route billing's from the discovery of an issuer that is not one
  const env = {
    BASE_URL: `${upstream.url}/api`,
    AUTH_URL: tokenServer.url,
    AUTH_CLIENT_ID: 'legacy-app',
    AUTH_CLIENT_SECRET: SECRET,
    AUTH_USERNAME: 'service-user',
    AUTH_PASSWORD: PASSWORD,
    ROUTE_BILLING_BASE_URL: `${upstream.url}/billing`,
    ROUTE_BILLING_PATH: '/billing',
    ROUTE_BILLING_AUTH_ISSUER_URL: `${tokenServer.url}/realms/nowhere`,
    ROUTE_BILLING_AUTH_CLIENT_SECRET: SECRET,
    ROUTE_BILLING_AUTH_PASSWORD: PASSWORD
  }
  let output = ''
  const code = await runCheck(env, [], (text) => { output += text }, '/nonexistent')
  t.equal(code, CHECK_EXIT.discovery, output)
  t.match(output, /^ok {3}grant \(route default\): password grant at /m, 'the default route\'s credential is fine')
  const line = output.split('\n').find((l) => l.startsWith('FAIL discovery (route billing): '))
  t.ok(line, 'route billing\'s discovery fails')
  t.match(line, /is not an OpenID Connect issuer/, 'the discovery failure says what is wrong')
  t.notMatch(line, /Check AUTH_URL and AUTH_REALM/, 'and is not taken for a wrong token URL, which the default route\'s settings would suggest')
})
