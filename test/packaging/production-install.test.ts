import { execFileSync, spawn } from 'node:child_process'
import { cpSync, existsSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { send, until } from '../helpers/build.js'
import { TokenServer } from '../../dev/token-server.js'
import { freePort, root } from '../helpers/process.js'
import { FakeUpstream } from '../helpers/upstream.js'

// A clean copy of the repository (tracked files only when this is a git
// checkout), installed as a new user would, then pruned to production
// dependencies as the image is: the built product must still run.
const npm = (cwd: string, ...args: string[]): string =>
  execFileSync('npm', [...args, '--no-audit', '--no-fund', '--prefer-offline'], { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })

t.test('clean copy → npm ci → build → npm ci --omit=dev → node dist/main.js proxies a request', async (t) => {
  const dir = t.testdir({})
  const copy = join(dir, 'auth-sidecar')
  const tracked = existsSync(join(root, '.git'))
    ? execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: root, encoding: 'utf8' }).split('\0').filter(Boolean)
    : readdirSync(root).filter((f) => !['node_modules', 'dist', '.git'].includes(f))
  for (const file of tracked) {
    if (existsSync(join(root, file))) cpSync(join(root, file), join(copy, file), { recursive: true })
  }
  t.notOk(existsSync(join(copy, 'node_modules')), 'starts without node_modules')
  t.notOk(existsSync(join(copy, 'dist')), 'and without dist')

  npm(copy, 'ci')
  t.ok(existsSync(join(copy, 'dist/main.js')), 'npm ci builds dist/ (prepare)')
  npm(copy, 'run', 'build')
  npm(copy, 'ci', '--omit=dev')
  t.notOk(existsSync(join(copy, 'node_modules/typescript')), 'dev dependencies are gone')
  t.notOk(existsSync(join(copy, 'node_modules/esbuild')))
  t.ok(existsSync(join(copy, 'dist/main.js')), 'dist/ survives the production install')

  const tokens = new TokenServer({ users: { 'service-user': 'pw' } })
  await tokens.listen()
  const upstream = new FakeUpstream(tokens)
  await upstream.listen()
  const [proxyPort, adminPort] = [await freePort(), await freePort()]
  const child = spawn(process.execPath, ['dist/main.js'], {
    cwd: copy,
    env: {
      PATH: process.env.PATH ?? '',
      BASE_URL: `${upstream.url}/v1`,
      AUTH_URL: tokens.url,
      AUTH_CLIENT_ID: 'legacy-app',
      AUTH_USERNAME: 'service-user',
      AUTH_PASSWORD: 'pw',
      PROXY_PORT: String(proxyPort),
      ADMIN_PORT: String(adminPort),
      ADMIN_HOST: '127.0.0.1'
    },
    stdio: ['ignore', 'pipe', 'inherit']
  })
  t.teardown(async () => {
    child.kill('SIGKILL')
    await upstream.close()
    await tokens.close()
  })
  let out = ''
  child.stdout.on('data', (c: Buffer) => { out += c.toString() })
  await until(() => out.includes('token obtained'), 15_000)
  const res = await send(`http://127.0.0.1:${proxyPort}/_verify/hello`)
  t.equal(res.status, 200)
  t.equal(upstream.received.at(-1)!.url, '/v1/_verify/hello')
  t.ok(upstream.received.at(-1)!.tokenValid)
})
