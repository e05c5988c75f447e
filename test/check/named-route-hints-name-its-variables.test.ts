import t from 'tap'
import { CHECK_EXIT, runCheck } from '../../src/check/run.js'
import { inTheirNames } from '../../src/config/names.js'
import { fakeServers } from '../helpers/process.js'

const PASSWORD = 'hint-password-3e4f5a'
const SECRET = 'hint-client-secret-6b7c'

t.test('check tells a named route to change its own variables, and the default route\'s where it takes those', async (t) => {
  const { tokenServer, upstream } = await fakeServers(t, { clients: { 'legacy-app': SECRET }, users: { 'service-user': PASSWORD } })
  // route billing sets its own client and scope, and takes the default route's auth server and user
  const env = {
    BASE_URL: `${upstream.url}/api`,
    AUTH_URL: tokenServer.url,
    AUTH_CLIENT_ID: 'legacy-app',
    AUTH_CLIENT_SECRET: SECRET,
    AUTH_USERNAME: 'service-user',
    AUTH_PASSWORD: PASSWORD,
    ROUTE_BILLING_BASE_URL: `${upstream.url}/billing`,
    ROUTE_BILLING_PATH: '/billing',
    ROUTE_BILLING_AUTH_CLIENT_ID: 'billing-app',
    ROUTE_BILLING_AUTH_CLIENT_SECRET: 'billing-secret',
    ROUTE_BILLING_AUTH_SCOPE: 'billing'
  }
  let output = ''
  const code = await runCheck(env, [], (text) => { output += text }, '/nonexistent')
  t.equal(code, CHECK_EXIT.grant, output)
  t.match(output, /^ok {3}grant \(route default\): /m, 'the default route\'s credential is fine')
  const line = output.split('\n').find((l) => l.startsWith('FAIL grant (route billing): '))
  t.ok(line, 'route billing\'s grant is refused')
  t.match(line, /ROUTE_BILLING_AUTH_CLIENT_ID/, 'the hint names the route\'s own client id')
  t.match(line, /ROUTE_BILLING_AUTH_CLIENT_SECRET\b/, 'and its own secret')
  t.notMatch(line, /(?<!ROUTE_BILLING_)AUTH_CLIENT_(ID|SECRET)\b/, 'not the default route\'s')
})

t.test('a text names the variables a route set, their _FILE twins, and the default route\'s for the rest', async (t) => {
  const setBy = { AUTH_CLIENT_ID: 'ROUTE_BILLING_AUTH_CLIENT_ID', AUTH_PASSWORD_FILE: 'ROUTE_BILLING_AUTH_PASSWORD_FILE', AUTH_SCOPE: 'ROUTE_BILLING_AUTH_SCOPE' }
  t.equal(inTheirNames('Check AUTH_CLIENT_ID and AUTH_CLIENT_SECRET', setBy), 'Check ROUTE_BILLING_AUTH_CLIENT_ID and AUTH_CLIENT_SECRET')
  t.equal(inTheirNames('Check AUTH_USERNAME and AUTH_PASSWORD (or their files)', setBy), 'Check AUTH_USERNAME and ROUTE_BILLING_AUTH_PASSWORD (or their files)')
  t.equal(inTheirNames('AUTH_SCOPE_X is not AUTH_SCOPE', setBy), 'AUTH_SCOPE_X is not ROUTE_BILLING_AUTH_SCOPE')
  t.equal(inTheirNames('ROUTE_BILLING_AUTH_TLS_CA_FILE stays as it is', setBy), 'ROUTE_BILLING_AUTH_TLS_CA_FILE stays as it is')
  t.equal(inTheirNames('AUTH_CLIENT_ID', undefined), 'AUTH_CLIENT_ID', 'the default route\'s credential names its own')
})
