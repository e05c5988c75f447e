import { execFileSync, spawn } from 'node:child_process'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { readConfiguration } from '../../src/config/load.js'

const minimal = {
  AUTH_URL: 'https://sso.internal',
  AUTH_CLIENT_ID: 'legacy-app',
  AUTH_USERNAME: 'svc',
  AUTH_PASSWORD: 'pw-secret-123'
}

t.test('.env is read once: a pipe (as a secrets injector provides) is read through once', async (t) => {
  const cwd = mkdtempSync(join(tmpdir(), 'dotenv-once-'))
  execFileSync('mkfifo', [join(cwd, '.env')])
  // one writer, one version: a second read of .env would wait for a writer that never comes
  const writer = spawn('sh', ['-c', 'printf "BASE_URL=https://first.internal\\n" > .env'], { cwd, stdio: 'ignore' })
  t.teardown(() => { writer.kill('SIGKILL') })
  const config = await readConfiguration(minimal, { cwd })
  t.equal(config.routes[0]!.origin, 'https://first.internal')
})
