import t from 'tap'
import { send, until } from '../helpers/build.js'
import { E2E_PASSWORD, start, startSidecar } from '../helpers/process.js'

const CLIENT_SECRET = 'e2e-client-secret-a1b2'
/** How long the renewal run lasts; E2E_SECONDS=60 for a longer soak. */
const RUN_SECONDS = Number(process.env.E2E_SECONDS ?? 8)

t.test('invalid configuration: exits non-zero at once with one message naming every problem', async (t) => {
  const run = start({ PROXY_PORT: 'x', AUTH_PASSWORD: 'never-echo-me' })
  const code = await run.exited
  t.equal(code, 1)
  const err = run.stderr.join('')
  t.equal(err.trim().split('\n').length, 1, 'one line')
  t.match(err, /PROXY_PORT must be a whole number/)
  t.match(err, /BASE_URL is required/)
  t.match(err, /AUTH_CLIENT_ID is required/)
  t.notMatch(err, /never-echo-me/)
  t.notMatch(err, /\n\s+at /, 'no stack trace')
})

t.test(`the built product through ${RUN_SECONDS} s of 3-second tokens: the upstream never sees an invalid token`, async (t) => {
  const { run, proxyUrl, tokenServer, upstream } = await startSidecar(t, {
    AUTH_CLIENT_SECRET: CLIENT_SECRET,
    SHUTDOWN_GRACE_MS: '3000'
  }, {
    clients: { 'legacy-app': CLIENT_SECRET },
    accessTokenSeconds: 3,
    refreshTokenSeconds: 10,
    sessionMaxSeconds: 5 // refresh tokens lapse with the session: the password grant takes over
  })

  const statuses = new Map<number, number>()
  const deadline = Date.now() + RUN_SECONDS * 1000
  const client = async (): Promise<void> => {
    while (Date.now() < deadline) {
      const res = await send(`${proxyUrl}/_verify/item`)
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1)
      await new Promise((resolve) => setTimeout(resolve, 5))
    }
  }
  await Promise.all([client(), client(), client(), client()])

  const invalid = upstream.received.filter((r) => !r.tokenValid)
  t.same(invalid.map((r) => r.tokenReason), [], 'no invalid token reached the upstream')
  t.same([...statuses.keys()], [200], `all ${upstream.received.length} requests answered 200`)
  const grants = tokenServer.grants.map((g) => g.grantType)
  t.ok(grants.filter((g) => g === 'refresh_token').length >= 2, `refresh grants used (${grants.join(' ')})`)
  t.ok(grants.filter((g) => g === 'password').length >= 2, 'and the password grant when the refresh token lapsed')
  t.equal(tokenServer.maxConcurrent, 1, 'never more than one grant in flight')

  // SIGTERM with a request in flight: it finishes, then the process exits 0.
  const slow = send(`${proxyUrl}/_slow/800`)
  await until(() => upstream.received.at(-1)?.url === '/api/_slow/800')
  run.child.kill('SIGTERM')
  t.equal((await slow).status, 200, 'the in-flight request finished')
  t.equal(await run.exited, 0, 'exit code 0')

  // Every line printed is JSON, and none holds a secret.
  const lines = run.stdout.filter(Boolean)
  t.ok(lines.every((l) => { try { JSON.parse(l); return true } catch { return false } }), 'stdout is JSON lines')
  t.ok(lines.filter((l) => l.includes('"msg":"request"')).length >= upstream.received.length - 1, 'one line per request')
  const all = lines.join('\n') + run.stderr.join('')
  t.notMatch(all, E2E_PASSWORD)
  t.notMatch(all, CLIENT_SECRET)
  const issued = upstream.received.map((r) => r.headers.authorization!.slice(7))
  t.ok(issued.every((token) => !all.includes(token)), 'no access token in the output')
  t.notMatch(all, /"refresh_token"\s*:\s*"/)
})
