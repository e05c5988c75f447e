// `node dist/main.js check` against oidc-provider: every step passes with a
// server nobody here wrote, and its refusals say which setting to change.
import t, { type Test } from 'tap'
import { until } from '../helpers/build.js'
import { start } from '../helpers/process.js'
import { API_CLIENT, runCheck, serviceClient, sidecarEnv, startProvider, tokenCheckingApi, type ProviderOptions, type RunningProvider } from '../helpers/oidc-provider.js'

const SECRET = 'check-sidecar-secret-1f2e3d'
const CLIENT = serviceClient({ client_id: 'orders-sidecar', client_secret: SECRET, token_endpoint_auth_method: 'client_secret_basic', scope: 'orders:read' })
const ENV = { AUTH_CLIENT_ID: 'orders-sidecar', AUTH_CLIENT_SECRET: SECRET, AUTH_CLIENT_AUTH: 'client_secret_basic' }
const RESOURCE = 'https://orders.example.com/'

async function servers (t: Test, options: Partial<ProviderOptions> = {}): Promise<{ op: RunningProvider, env: (more: Record<string, string>) => Record<string, string>, api: Awaited<ReturnType<typeof tokenCheckingApi>> }> {
  const op = await startProvider(t, { clients: [API_CLIENT, CLIENT], issuerPath: '/tenant-a', ...options })
  const api = await tokenCheckingApi(t, op, options.jwtResource !== undefined ? { jwtAudience: RESOURCE } : {})
  return { op, api, env: (more) => sidecarEnv(op, api.url, { ...ENV, AUTH_TOKEN_URL: '', AUTH_ISSUER_URL: op.issuer, ...more }) }
}

function noSecrets (t: Test, output: string): void {
  t.notMatch(output, SECRET, 'no client secret in the output')
  t.notMatch(output, /eyJ[\w-]{10,}\.[\w-]{10,}/, 'no token')
}

t.test('check: discovery, grant, upstream, session, exit 0, a line each', async (t) => {
  const { op, api, env } = await servers(t)
  const { code, lines, output } = await runCheck(env({}))
  t.equal(code, 0, output)
  t.match(lines[0], /^ok {3}configuration: oauth2, client_credentials grant as client orders-sidecar \(client_secret_basic\)/)
  t.match(lines[1], new RegExp(`^ok {3}discovery: ${op.issuer}/\\.well-known/openid-configuration: token endpoint ${op.tokenUrl}.*revocation endpoint ${op.revocationUrl}$`))
  t.match(lines[2], /^ok {3}grant: client_credentials grant at \S+\/tenant-a\/token \(client_secret_basic\): access token for 600 s, no refresh token \(renewal is a new grant\)/)
  t.match(lines[3], /^ok {3}upstream: GET http:\/\/127\.0\.0\.1:\d+\/? answered 200 in \d+ ms: reached, token accepted$/)
  t.match(lines[4], new RegExp(`^ok {3}session: session ended: the revocation endpoint ${op.revocationUrl} answered 200$`))
  t.equal(lines.length, 5)
  t.same(api.calls.map((c) => c.status), [200], 'the API took the token')
  t.same(op.requests.filter((r) => r.route === 'revocation').map((r) => [r.status, r.clientId]), [[200, 'orders-sidecar']], 'the server revoked it, for that client')
  noSecrets(t, output)
})

t.test('check: a revocation endpoint answering unsupported_token_type (a JWT access token) is nothing to end, exit 0', async (t) => {
  const { op, env } = await servers(t, { jwtResource: { resource: RESOURCE, scope: 'orders:read', defaultResource: true } })
  const { code, lines, output } = await runCheck(env({ AUTH_SCOPE: 'orders:read' }))
  t.same(op.requests.filter((r) => r.route === 'revocation').map((r) => [r.status, r.error]), [[400, 'unsupported_token_type']], 'the server cannot revoke a JWT access token')
  t.equal(code, 0, output)
  // not a failure: passed, or skipped as there is nothing to end
  t.match(lines.at(-1), /^(ok {3}|skip )session: .*nothing to end/)
  noSecrets(t, output)
})

t.test('shutdown: unsupported_token_type from revocation is nothing to end, not an error', async (t) => {
  const { op, env } = await servers(t, { jwtResource: { resource: RESOURCE, scope: 'orders:read', defaultResource: true } })
  const run = start({ ...env({ AUTH_SCOPE: 'orders:read' }), PROXY_PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1' })
  t.teardown(() => { run.child.kill('SIGKILL') })
  await until(() => run.stdout.some((l) => l.includes('"token obtained')), 30_000)
  run.child.kill('SIGTERM')
  t.equal(await run.exited, 0)
  t.same(op.requests.filter((r) => r.route === 'revocation').map((r) => [r.status, r.error]), [[400, 'unsupported_token_type']])
  const records = run.stdout.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { level: number, msg: string })
  t.same(records.filter((r) => r.level >= 40).map((r) => r.msg), [], 'no warning and no error')
  t.ok(run.stdout.some((l) => /nothing to end/.test(l)), 'the log says there was nothing to end')
})

for (const [refusal, error, more, options, names] of [
  ['a grant type the server does not offer', 'unsupported_grant_type', { AUTH_GRANT_TYPE: 'password', AUTH_USERNAME: 'svc', AUTH_PASSWORD: 'svc-password-5a' }, {}, /AUTH_GRANT_TYPE.*client_credentials/],
  ['a client the server does not authenticate', 'invalid_client', { AUTH_CLIENT_SECRET: 'not-the-secret-0000' }, {}, /AUTH_CLIENT_(ID|SECRET|AUTH)/],
  ['a scope the server refuses', 'invalid_scope', { AUTH_SCOPE: 'orders:write' }, {}, /AUTH_SCOPE/]
] as const) {
  t.test(`check and the log: ${refusal} (${error}) names what to change`, async (t) => {
    const { op, env } = await servers(t, options)
    const { code, lines, output } = await runCheck(env(more))
    t.equal(code, 4, 'the grant step fails')
    t.same(op.tokenRequests().map((r) => r.error), [error], `the server answered ${error}, once`)
    t.match(lines.at(-1), new RegExp(`^FAIL grant: .*${error}`))
    t.match(lines.at(-1), names, 'names the setting')
    noSecrets(t, output)

    const run = start({ ...env(more), PROXY_PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1' })
    t.teardown(() => { run.child.kill('SIGKILL') })
    const line = (): string | undefined => run.stdout.find((l) => l.includes(error))
    await until(() => line() !== undefined, 30_000)
    t.match(line(), names, 'and so does the log')
    noSecrets(t, run.stdout.join('\n'))
  })
}

t.test('check: an issuer with a trailing slash the server\'s does not have fails discovery, both values shown', async (t) => {
  const { op, env } = await servers(t)
  const { code, lines, output } = await runCheck(env({ AUTH_ISSUER_URL: `${op.issuer}/` }))
  t.equal(code, 3, output)
  t.match(lines.at(-1), /^FAIL discovery: /)
  t.ok(lines.at(-1)!.includes(`"${op.issuer}"`) || new RegExp(`${op.issuer.replace(/[./]/g, '\\$&')}(?![\\w/])`).test(lines.at(-1)!), 'the server\'s issuer')
  t.ok(lines.at(-1)!.includes(`${op.issuer}/`), 'and the configured one')
  t.same(op.tokenRequests(), [], 'no grant')
})
