import { spawn } from 'node:child_process'
import t from 'tap'
import { TokenServer } from '../../dev/token-server.js'
import { build, send, until } from '../helpers/build.js'
import { freePort, root } from '../helpers/process.js'

t.test('the compose example API: a realm token passes (through the sidecar), anything else is 401', async (t) => {
  const tokens = new TokenServer({ users: { 'service-user': 'pw' } })
  await tokens.listen()
  t.teardown(() => tokens.close())
  const port = await freePort()
  const api = spawn(process.execPath, [`${root}deploy/example-api/server.mjs`], {
    env: { PATH: process.env.PATH ?? '', PORT: String(port), ISSUER: `${tokens.url}/auth/realms/service-realm` },
    stdio: ['ignore', 'pipe', 'inherit']
  })
  t.teardown(() => { api.kill() })
  let out = ''
  api.stdout.on('data', (c: Buffer) => { out += c.toString() })
  await until(() => out.includes('example API on'))
  const apiUrl = `http://127.0.0.1:${port}`

  t.equal((await send(`${apiUrl}/hello`)).status, 401, 'no token: 401')
  t.equal((await send(`${apiUrl}/hello`, { headers: { authorization: 'Bearer a.b.c' } })).status, 401, 'a forged token: 401')

  const h = await build(t, { BASE_URL: apiUrl, AUTH_URL: tokens.url, AUTH_CLIENT_SECRET: '', AUTH_PASSWORD: 'pw' })
  // the harness's own token server is not used: point the sidecar at the API's realm
  await until(() => h.app.credential.ready())
  const res = await send(`${h.proxyUrl}/hello`)
  t.equal(res.status, 200)
  t.match(JSON.parse(res.body), { caller: 'service-user', client: 'legacy-app', method: 'GET', path: '/hello' })
})
