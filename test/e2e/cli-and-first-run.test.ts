import { readFileSync } from 'node:fs'
import { createServer } from 'node:net'
import t from 'tap'
import { properties } from '../../src/config/schema.js'
import { TokenServer } from '../../dev/token-server.js'
import { send, until } from '../helpers/build.js'
import { E2E_PASSWORD, freePort, root, spawnSidecar, start, startSidecar, untilToken } from '../helpers/process.js'
import { FakeUpstream } from '../helpers/upstream.js'

const version = (JSON.parse(readFileSync(`${root}package.json`, 'utf8')) as { version: string }).version

t.test('--help and -h print usage with every variable and exit 0, touching nothing, even with a .env', async (t) => {
  const tokenServer = new TokenServer({ users: { 'service-user': E2E_PASSWORD } })
  await tokenServer.listen()
  t.teardown(() => tokenServer.close())
  const dir = t.testdir({ '.env': `BASE_URL=http://127.0.0.1:1\nAUTH_URL=${tokenServer.url}\nAUTH_CLIENT_ID=legacy-app\nAUTH_USERNAME=service-user\nAUTH_PASSWORD=${E2E_PASSWORD}\n` })
  const flags = ['--help', '-h']
  const runs = flags.map((flag) => start({}, dir, [flag]))
  const codes = await Promise.all(runs.map(async (run) => await run.exited))
  for (const [i, flag] of flags.entries()) {
    t.equal(codes[i], 0, flag)
    const out = runs[i]!.stdout.join('\n')
    for (const name of Object.keys(properties)) t.match(out, name, `${flag} lists ${name}`)
    t.match(out, /ROUTE_<NAME>_BASE_URL[\s\S]*ROUTE_<NAME>_AUTH_EXCHANGE_AUDIENCE/, 'and the settings of a named route')
    t.match(out, /README\.md/)
  }
  await new Promise((resolve) => setTimeout(resolve, 200))
  t.equal(tokenServer.grants.length, 0, 'no grant was attempted')
})

t.test('npm run demo: each line it offers to try answers 200 through the sidecar, the second with an exchanged token', async (t) => {
  const run = start({ PROXY_PORT: '0', ADMIN_PORT: '0' }, root, [], { entry: `${root}dist/dev/demo.js` })
  t.teardown(async () => {
    run.child.kill('SIGTERM')
    await run.exited
  })
  await until(() => run.stderr.join('').includes('Stop with Ctrl-C'), 15_000)
  const urls = [...run.stderr.join('').matchAll(/curl -s '([^']+)'/g)].map((m) => m[1]!)
  t.equal(urls.length, 2, urls.join(' '))
  const answers = await Promise.all(urls.map(async (url) => await send(url)))
  t.same(answers.map((a) => a.status), [200, 200])
  const [hello, reports] = answers.map((a) => JSON.parse(a.body) as { user: string, client: string, audience: string })
  t.match(hello, { user: 'service-user', client: 'legacy-app' })
  t.match(reports, { user: 'service-user', audience: 'reports-api' }, 'the /reports route\'s token is for reports-api')
})

t.test('--version prints the package version; the start-up line carries it', async (t) => {
  const run = start({}, root, ['--version'])
  t.equal(await run.exited, 0)
  t.equal(run.stdout.join('').trim(), version)
  const { run: sidecar } = await startSidecar(t)
  const line = sidecar.stdout.find((l) => l.includes('auth-sidecar listening'))!
  t.equal((JSON.parse(line) as { version: string }).version, version)
})

t.test('a taken port: one line naming the variable and the address, exit 1, no stack', async (t) => {
  const blocker = createServer()
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { blocker.close(() => resolve()) }))
  const taken = (blocker.address() as { port: number }).port
  const run = start({
    BASE_URL: 'http://127.0.0.1:1', AUTH_URL: 'http://127.0.0.1:1', AUTH_CLIENT_ID: 'a', AUTH_USERNAME: 'u', AUTH_PASSWORD: 'never-shown',
    PROXY_PORT: String(taken), ADMIN_PORT: String(await freePort()), ADMIN_HOST: '127.0.0.1'
  })
  t.equal(await run.exited, 1)
  const err = run.stderr.join('')
  t.equal(err.trim().split('\n').length, 1, 'one line')
  t.match(err, `PROXY_PORT: 127.0.0.1:${taken} is already in use`)
  t.notMatch(err, /\n\s+at /)
  t.notMatch(err + run.stdout.join(''), 'never-shown')
})

t.test('misspelt variables are warned about at start, with the nearest name', async (t) => {
  const { run } = await startSidecar(t, { AUTH_SCOPES: 'openid', UPSTREAM_TIMEOUT: '5000' })
  const warnings = run.stdout.filter((l) => l.includes('"event":"config"')).map((l) => (JSON.parse(l) as { msg: string }).msg)
  t.same(warnings, [
    'AUTH_SCOPES is not a variable of auth-sidecar; did you mean AUTH_SCOPE?',
    'UPSTREAM_TIMEOUT is not a variable of auth-sidecar; did you mean UPSTREAM_TIMEOUT_MS?'
  ])
})

t.test('Keycloak 17+ (no /auth) behind a plain AUTH_URL: the other layout is found, used, and named', async (t) => {
  const tokenServer = new TokenServer({ users: { 'service-user': E2E_PASSWORD }, tokenPath: '/realms/service-realm/protocol/openid-connect/token' })
  await tokenServer.listen()
  const upstream = new FakeUpstream(tokenServer)
  await upstream.listen()
  t.teardown(async () => { await upstream.close(); await tokenServer.close() })
  const { run, proxyUrl } = await spawnSidecar(t, upstream.url, tokenServer.url, E2E_PASSWORD)
  await untilToken(run)
  t.equal((await send(`${proxyUrl}/_verify`)).status, 200)
  const warning = run.stdout.map((l) => JSON.parse(l) as { msg: string, level: number }).find((r) => r.msg.includes('AUTH_TOKEN_URL='))!
  t.equal(warning.level, 40)
  t.match(warning.msg, `the token endpoint answers at ${tokenServer.tokenUrl}`)
  // later grants go straight to it: one try at the derived URL, then only the right one
  t.equal(tokenServer.grants.length, 1)
})

t.test('a token URL that is no token endpoint: readyz and the log say so, naming the URL and AUTH_TOKEN_URL', async (t) => {
  const tokenServer = new TokenServer({ users: { 'service-user': E2E_PASSWORD }, tokenPath: '/somewhere/else/token' })
  await tokenServer.listen()
  t.teardown(() => tokenServer.close())
  const { run, adminUrl } = await spawnSidecar(t, 'http://127.0.0.1:1', tokenServer.url, E2E_PASSWORD, { TOKEN_RETRY_MIN_MS: '100', TOKEN_RETRY_MAX_MS: '200' })
  await until(() => run.stdout.some((l) => l.includes('wrong token URL')), 10_000)
  const line = JSON.parse(run.stdout.find((l) => l.includes('wrong token URL'))!) as { level: number, msg: string, reason: string }
  t.equal(line.level, 50)
  t.match(line.msg, 'AUTH_TOKEN_URL')
  t.match(line.reason, `POST ${tokenServer.url}/auth/realms/service-realm/protocol/openid-connect/token: token endpoint answered 404`)
  const ready = await send(`${adminUrl}/readyz`)
  t.equal(ready.status, 503)
  t.match(JSON.parse(ready.body), { reason: /^wrong token URL: / })
  t.notMatch(run.stdout.join('\n'), E2E_PASSWORD)
})
