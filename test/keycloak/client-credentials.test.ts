import { keycloakTest } from '../helpers/keycloak.js'
import { spawnSidecar, traffic, untilReady } from '../helpers/process.js'
import { resourceServer } from '../helpers/resource-server.js'

const SERVICE_SECRET = 'service-app-secret-3c7a'

for (const clientAuth of ['client_secret_post', 'client_secret_basic'] as const) {
  keycloakTest(`client_credentials with a service-account client, ${clientAuth}: renewed by new grants, no user session`, async (t, kc) => {
    const realm = await kc.root.realm(t, { accessTokenLifespan: 4 })
    const api = await resourceServer(t, realm.issuer, realm.jwksUrl)
    const sidecar = await spawnSidecar(t, api.url, '', '', {
      AUTH_ISSUER_URL: realm.issuer,
      AUTH_GRANT_TYPE: 'client_credentials',
      AUTH_CLIENT_ID: 'service-app',
      AUTH_CLIENT_SECRET: SERVICE_SECRET,
      AUTH_CLIENT_AUTH: clientAuth,
      AUTH_USERNAME: '',
      AUTH_PASSWORD: ''
    })
    await untilReady(sidecar)
    const statuses = await traffic(sidecar, 6)
    t.same([...new Set(statuses)], [200])
    t.same(new Set(api.verdicts.map((v) => v.claims?.azp)), new Set(['service-app']), 'tokens of the service account')
    t.ok(new Set(api.verdicts.map((v) => v.token)).size >= 2, 'renewed while running')
    const logins = await realm.events(['CLIENT_LOGIN', 'CLIENT_LOGIN_ERROR'])
    t.ok(logins.length >= 2 && logins.every((e) => e.type === 'CLIENT_LOGIN' && e.clientId === 'service-app'), `${logins.length} client_credentials grants, none refused`)
    t.ok(sidecar.run.stdout.some((l) => l.includes('"grant":"client_credentials"') && l.includes('"outcome":"success"')))
    sidecar.run.child.kill('SIGTERM')
    t.equal(await sidecar.run.exited, 0)
    t.notMatch(sidecar.run.stdout.join('\n'), SERVICE_SECRET)
  })
}
