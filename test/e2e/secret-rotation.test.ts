import { execFileSync } from 'node:child_process'
import { renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
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

t.test('a password file swapped for a FIFO or /dev/zero: the last good password, a warning naming the file, probes answer, SIGTERM exits', async (t) => {
  const dir = t.testdir({ password: 'service-password\n' })
  const s = await startSidecar(t, { AUTH_PASSWORD: '', AUTH_PASSWORD_FILE: join(dir, 'password') }, { users: { 'service-user': 'service-password' }, accessTokenSeconds: 2 })
  await until(() => s.tokenServer.grants.length === 1)
  rmSync(join(dir, 'password'))
  execFileSync('mkfifo', [join(dir, 'password')])
  // the session ended: the next renewal needs the password
  s.tokenServer.endSessions()
  await until(() => s.tokenServer.grants.filter((g) => g.grantType === 'password').length === 2, 5_000)
  t.equal(s.tokenServer.grants.at(-1)!.status, 200, 'the last good password was sent')
  rmSync(join(dir, 'password'))
  symlinkSync('/dev/zero', join(dir, 'password'))
  s.tokenServer.endSessions()
  await until(() => s.tokenServer.grants.filter((g) => g.grantType === 'password').length === 3, 5_000)
  t.equal(s.tokenServer.grants.at(-1)!.status, 200)
  t.equal((await send(`${s.adminUrl}/healthz`)).status, 200, 'the admin port answers')
  t.equal((await send(`${s.proxyUrl}/_verify`)).status, 200, 'and the proxy')
  const warnings = s.run.stdout.filter((l) => l.includes('"event":"credentials"'))
  t.equal(warnings.length, 1, 'one warning: both are no regular file')
  t.match(warnings[0], /AUTH_PASSWORD_FILE \(\S+password\) is not a regular file: keeping its last good value/)
  s.run.child.kill('SIGTERM')
  t.equal(await s.run.exited, 0)
})
