import type { Test } from 'tap'
import { keycloakTest, type Realm } from '../helpers/keycloak.js'
import { root, start } from '../helpers/process.js'
import { resourceServer } from '../helpers/resource-server.js'

const SECRET = 'legacy-app-secret-8f2d'
const PASSWORD = 'service-user-password-5e1f'

/** `node dist/main.js check` against the realm: its exit code and lines. */
async function check (t: Test, realm: Realm, env: Record<string, string>): Promise<{ code: number | null, lines: string[] }> {
  const api = await resourceServer(t, realm.issuer, realm.jwksUrl)
  const run = start({
    BASE_URL: api.url,
    AUTH_ISSUER_URL: realm.issuer,
    AUTH_CLIENT_ID: 'legacy-app',
    AUTH_CLIENT_SECRET: SECRET,
    AUTH_USERNAME: 'service-user',
    AUTH_PASSWORD: PASSWORD,
    ...env
  }, root, ['check'])
  const code = await run.exited
  return { code, lines: run.stdout }
}

keycloakTest('check passes against the real server: discovery, grant, upstream, the session ended', async (t, kc) => {
  const realm = await kc.root.realm(t)
  const { code, lines } = await check(t, realm, {})
  t.equal(code, 0, lines.join('\n'))
  t.same(lines.filter((l) => /^(ok|FAIL|skip)/.test(l)).map((l) => l.slice(0, 4).trim() + ' ' + l.slice(5, l.indexOf(':'))), [
    'ok configuration', 'ok discovery', 'ok grant', 'ok upstream', 'ok session'
  ])
  t.match(lines.join('\n'), new RegExp(`issuer ${realm.issuer.replace(/[.]/g, '\\.')}`))
  t.same(await realm.sessions('service-user'), [], 'the session it opened is ended')
  t.notMatch(lines.join('\n'), new RegExp(`${PASSWORD}|${SECRET}|eyJ`), 'no secret and no token printed')
})

keycloakTest('check fails at the grant, exit 4, for a wrong password: what to change', async (t, kc) => {
  const realm = await kc.root.realm(t)
  const { code, lines } = await check(t, realm, { AUTH_PASSWORD: 'not-the-password' })
  t.equal(code, 4)
  t.match(lines.join('\n'), /FAIL grant: token endpoint answered 400 invalid_grant \(Invalid user credentials\)\. Check AUTH_USERNAME and AUTH_PASSWORD/)
  t.notMatch(lines.join('\n'), /not-the-password/)
})

keycloakTest('check fails at the grant, exit 4, for a client without direct access grants', async (t, kc) => {
  const realm = await kc.root.realm(t)
  const { code, lines } = await check(t, realm, { AUTH_CLIENT_ID: 'no-direct-grants', AUTH_CLIENT_SECRET: 'no-direct-grants-secret-1b9e' })
  t.equal(code, 4)
  t.match(lines.join('\n'), /FAIL grant: token endpoint answered 400 unauthorized_client \(Client not allowed for direct access grants\): turn on "Direct access grants" for this client in Keycloak/)
})

keycloakTest('check fails at the grant, exit 4, for a wrong client secret', async (t, kc) => {
  const realm = await kc.root.realm(t)
  const { code, lines } = await check(t, realm, { AUTH_CLIENT_SECRET: 'not-the-secret' })
  t.equal(code, 4)
  t.match(lines.join('\n'), /FAIL grant: token endpoint answered 401 unauthorized_client \(Invalid client or Invalid client credentials\)\. Check AUTH_CLIENT_ID and AUTH_CLIENT_SECRET/)
  t.notMatch(lines.join('\n'), /not-the-secret/)
})

keycloakTest('check fails at the grant, exit 4, for a user with a pending required action', async (t, kc) => {
  const realm = await kc.root.realm(t)
  const { code, lines } = await check(t, realm, { AUTH_USERNAME: 'pending-user', AUTH_PASSWORD: 'pending-user-password-7d3c' })
  t.equal(code, 4)
  t.match(lines.join('\n'), /FAIL grant: token endpoint answered 400 invalid_grant \(Account is not fully set up\): the service account has pending required actions in Keycloak/)
})

keycloakTest('check passes with client_secret_jwt against Keycloak\'s "Signed JWT with Client Secret"', async (t, kc) => {
  const realm = await kc.root.realm(t)
  await realm.updateClient('legacy-app', { clientAuthenticatorType: 'client-secret-jwt' })
  const { code, lines } = await check(t, realm, { AUTH_CLIENT_AUTH: 'client_secret_jwt' })
  t.equal(code, 0, lines.join('\n'))
  t.match(lines.join('\n'), /ok {3}grant: password grant at \S+ \(client_secret_jwt\)/)
  t.same(await realm.sessions('service-user'), [], 'and the logout, authenticated the same way, ended the session')
})
