import t from 'tap'
import { build, send } from '../helpers/build.js'

t.test('AUTH_MODE=basic: RFC 7617 credentials on every request, ready at once, no token endpoint', async (t) => {
  const h = await build(t, { AUTH_MODE: 'basic', AUTH_URL: '', AUTH_CLIENT_ID: '', AUTH_CLIENT_SECRET: '', AUTH_USERNAME: 'svc:user', AUTH_PASSWORD: 'pä55' })
  t.equal((await send(`${h.adminUrl}/readyz`)).status, 200, 'ready without any grant')
  const res = await send(`${h.proxyUrl}/x`, { headers: { authorization: 'Bearer not-this' } })
  t.equal(res.status, 200)
  const got = h.upstream.received.at(-1)!.headers.authorization
  t.equal(got, `Basic ${Buffer.from('svc:user:pä55', 'utf8').toString('base64')}`)
  t.equal(h.tokenServer.grants.length, 0, 'the token endpoint is never asked')
  t.notMatch(h.log.lines.join('\n'), /pä55|c3ZjOnVzZXI6cMOkNTU/)
})
