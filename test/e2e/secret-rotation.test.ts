import { renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { send, until } from '../helpers/build.js'
import { startSidecar } from '../helpers/process.js'

t.test('a rotated password file is used at once, cutting the rejected-credentials backoff short', async (t) => {
  const dir = t.testdir({ password: 'old-password\n', secret: 'client-secret-1\n' })
  const s = await startSidecar(t, {
    AUTH_PASSWORD: '',
    AUTH_PASSWORD_FILE: join(dir, 'password'),
    AUTH_CLIENT_SECRET_FILE: join(dir, 'secret')
  }, { users: { 'service-user': 'new-password' }, clients: { 'legacy-app': 'client-secret-1' } }, false)

  await until(() => s.tokenServer.grants.length === 1)
  t.equal(s.tokenServer.grants[0]!.status, 400, 'the old password is rejected')
  t.equal((await send(`${s.adminUrl}/readyz`)).status, 503)

  // as the kubelet does: a new file moved into place
  writeFileSync(join(dir, 'password.new'), 'new-password\n')
  renameSync(join(dir, 'password.new'), join(dir, 'password'))
  const changedAt = Date.now()
  await until(() => s.tokenServer.grants.some((g) => g.status === 200), 10_000)
  t.ok(Date.now() - changedAt < 5_000, `picked up ${Date.now() - changedAt} ms after the change, not after the minute-long backoff`)
  t.equal(s.tokenServer.grants.length, 2, 'one more grant, no loop')
  t.equal(s.tokenServer.grants[1]!.form.password, 'new-password')
  await until(() => s.run.stdout.some((l) => l.includes('"msg":"token obtained after failed attempts"')))
  t.equal((await send(`${s.proxyUrl}/_verify`)).status, 200)

  // the client secret rotates too: the next password grant carries the new one
  s.tokenServer.clients['legacy-app'] = 'client-secret-2'
  writeFileSync(join(dir, 'secret'), 'client-secret-2\n')
  s.tokenServer.endSessions()
  s.upstream.rejectTokens.add((s.upstream.received.at(-1)!.headers.authorization)!)
  t.equal((await send(`${s.proxyUrl}/_verify`)).status, 200, 'a 401 leads to refresh (refused), then a password grant with the new secret')
  t.equal(s.tokenServer.grants.at(-1)!.form.client_secret, 'client-secret-2')
  const output = s.run.stdout.join('\n')
  for (const secret of ['old-password', 'new-password', 'client-secret-1', 'client-secret-2']) t.notMatch(output, secret)
})
