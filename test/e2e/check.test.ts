import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync } from 'node:fs'
import { createServer as createHttpServer } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import { createServer, type Server } from 'node:net'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { CHECK_EXIT, runCheck } from '../../src/check/run.js'
import { TokenServer, type Fault, type TokenServerOptions } from '../../dev/token-server.js'
import { TestCa } from '../helpers/certificates.js'
import { dpopApi } from '../helpers/dpop-api.js'
import { freePort, start, untilToken } from '../helpers/process.js'
import { FakeUpstream } from '../helpers/upstream.js'

const PASSWORD = 'check-password-7a6b5c'
const SECRET = 'check-client-secret-3e4f'

interface Servers { tokenServer: TokenServer, upstream: FakeUpstream, env: Record<string, string> }

async function servers (t: Test, options: TokenServerOptions = {}, faults: Fault[] = []): Promise<Servers> {
  const tokenServer = new TokenServer({ clients: { 'legacy-app': SECRET }, users: { 'service-user': PASSWORD }, ...options })
  await tokenServer.listen()
  tokenServer.faults.push(...faults)
  const upstream = new FakeUpstream(tokenServer)
  await upstream.listen()
  t.teardown(async () => {
    await upstream.close()
    await tokenServer.close()
  })
  return {
    tokenServer,
    upstream,
    env: {
      BASE_URL: `${upstream.url}/api`,
      AUTH_URL: tokenServer.url,
      AUTH_CLIENT_ID: 'legacy-app',
      AUTH_CLIENT_SECRET: SECRET,
      AUTH_USERNAME: 'service-user',
      AUTH_PASSWORD: PASSWORD
    }
  }
}

async function check (env: Record<string, string>, args: string[] = []): Promise<{ code: number, output: string, lines: string[] }> {
  let output = ''
  const code = await runCheck(env, args, (text) => { output += text }, '/nonexistent')
  return { code, output, lines: output.trimEnd().split('\n') }
}

function noSecrets (t: Test, output: string, tokenServer?: TokenServer): void {
  t.notMatch(output, PASSWORD, 'no password')
  t.notMatch(output, SECRET, 'no client secret')
  t.notMatch(output, /eyJ[A-Za-z0-9_-]{10,}/, 'no token')
  for (const g of tokenServer?.grants ?? []) if (g.form.refresh_token) t.notMatch(output, g.form.refresh_token)
}

t.test('check: configuration, grant, upstream, session; exit 0, one line each, nothing secret', async (t) => {
  const s = await servers(t)
  const { code, lines, output } = await check(s.env, ['--path', '/_verify'])
  t.equal(code, CHECK_EXIT.ok, output)
  t.equal(lines.length, 4)
  t.match(lines[0], /^ok {3}configuration: oauth2, password grant as client legacy-app \(client_secret_post\), token URL http:\/\/127\.0\.0\.1:\d+\/auth\/realms\/service-realm\/protocol\/openid-connect\/token, upstream http:\/\/127\.0\.0\.1:\d+\/api$/)
  t.match(lines[1], /^ok {3}grant: password grant at http:\/\/\S+ \(client_secret_post\): access token for 300 s, a refresh token for 1800 s; issuer http:\/\/127\.0\.0\.1:\d+\/auth\/realms\/service-realm, audience account, scope "profile email", expires 20\d\d-\d\d-\d\dT/)
  t.match(lines[2], /^ok {3}upstream: GET http:\/\/127\.0\.0\.1:\d+\/api\/_verify answered 200 in \d+ ms: reached, token accepted$/)
  t.match(lines[3], /^ok {3}session: session ended: the end-session endpoint \S+\/logout answered 204$/)
  t.equal(s.upstream.received.length, 1)
  t.equal(s.upstream.received[0]!.tokenValid, true, 'the request went out with the token, through the proxy\'s code path')
  t.equal(s.tokenServer.activeSessions(), 0, 'the session it opened is ended')
  t.equal(s.tokenServer.grants.length, 1)
  noSecrets(t, output, s.tokenServer)
})

t.test('check with the forward proxy: the CA, and what each route intercepts', async (t) => {
  const s = await servers(t)
  const dir = mkdtempSync(join(tmpdir(), 'check-forward-'))
  const ca = TestCa.create(dir, 'check forward CA')
  const { code, lines, output } = await check({ ...s.env, FORWARD_PROXY_PORT: '0', FORWARD_PROXY_CA_CERT_FILE: ca.caFile, FORWARD_PROXY_CA_KEY_FILE: join(dir, 'ca.key') })
  t.equal(code, CHECK_EXIT.ok, output)
  t.match(output, /^ok {3}forward proxy: CA subject CN=check forward CA, expires 20\d\d-.*, x5t#S256 [\w-]{43}$/m)
  t.match(output, /^ok {3}forward proxy: requests for 127\.0\.0\.1:\d+: http:\/\/127\.0\.0\.1:\d+\/api\/\.\.\. gets the route's credential$/m)
  t.notMatch(output, /PRIVATE KEY/, 'no key material')
  t.equal(lines.length, 6)
})

t.test('check opens no listener: the configured ports may be taken', async (t) => {
  const s = await servers(t)
  const taken: Server = createServer()
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve))
  t.teardown(() => taken.close())
  const port = String((taken.address() as AddressInfo).port)
  const { code } = await check({ ...s.env, PROXY_PORT: port, ADMIN_PORT: port, ADMIN_HOST: '127.0.0.1' })
  t.equal(code, CHECK_EXIT.ok)
})

t.test('check with AUTH_ISSUER_URL and client_credentials: discovery first, the grant\'s own wording', async (t) => {
  const s = await servers(t)
  const { code, lines, output } = await check({ ...s.env, AUTH_URL: '', AUTH_ISSUER_URL: s.tokenServer.issuer, AUTH_GRANT_TYPE: 'client_credentials', AUTH_USERNAME: '', AUTH_PASSWORD: '' })
  t.equal(code, CHECK_EXIT.ok, output)
  t.match(lines[1], /^ok {3}discovery: http:\/\/\S+\/\.well-known\/openid-configuration: token endpoint \S+\/token, end-session endpoint \S+\/logout, revocation endpoint \S+\/revoke$/)
  t.match(lines[2], /^ok {3}grant: client_credentials grant at \S+ \(client_secret_post\): access token for 300 s, no refresh token \(renewal is a new grant\);/)
  t.match(lines[4], /^ok {3}session: session ended: the revocation endpoint \S+\/revoke answered 200$/)
  noSecrets(t, output, s.tokenServer)
})

t.test('check: rejected credentials fail the grant step (exit 4), once, saying what to change', async (t) => {
  const s = await servers(t)
  const { code, lines, output } = await check({ ...s.env, AUTH_PASSWORD: 'wrong-password' })
  t.equal(code, CHECK_EXIT.grant)
  t.match(lines.at(-1), /^FAIL grant: token endpoint answered 400 invalid_grant \(Invalid user credentials\)\. Check AUTH_USERNAME and AUTH_PASSWORD/)
  t.equal(s.tokenServer.grants.length, 1, 'one grant, no retries')
  t.notMatch(output, 'wrong-password')
})

t.test('check: a token server echoing the form has it scrubbed from the output, its control characters neutralised', async (t) => {
  const s = await servers(t, {}, [{ status: 400, body: JSON.stringify({ error: 'invalid_request', error_description: `got password=${PASSWORD}&client_secret=${SECRET}\u001b[2J\r\nok   grant: forged \u202eliated` }) }])
  const { code, output, lines } = await check(s.env)
  t.equal(code, CHECK_EXIT.grant)
  noSecrets(t, output)
  t.match(output, /got password=\[redacted\]/)
  t.notMatch(output, /\u001b|\r/, 'no terminal control from what the server said')
  t.notMatch(output, /[\u202a-\u202e\u2066-\u2069]/, 'no bidirectional control either: the terminal shows what was sent')
  t.equal(lines.length, 2, 'and no forged line')
})

t.test('check: a password the server echoes across the 200-character cut leaves no part of itself', async (t) => {
  // the password straddles the 200th character of the description
  const s = await servers(t, {}, [{ status: 401, body: JSON.stringify({ error: 'invalid_grant', error_description: `${'x'.repeat(190)} ${PASSWORD} and more` }) }])
  const { code, output } = await check(s.env)
  t.equal(code, CHECK_EXIT.grant)
  for (let n = 4; n <= PASSWORD.length; n++) t.notOk(output.includes(PASSWORD.slice(0, n)), `not the first ${n} characters`)
  t.match(output, /x{190}…/, 'the description is cut before the password\'s place')
})

t.test('check: a wrong token URL, an unreachable auth server, an untrusted certificate: each named', async (t) => {
  const s = await servers(t)
  const wrong = await check({ ...s.env, AUTH_URL: '', AUTH_TOKEN_URL: `${s.tokenServer.url}/not/the/token` })
  t.equal(wrong.code, CHECK_EXIT.grant)
  t.match(wrong.output, /this URL is not the token endpoint\. Check AUTH_URL and AUTH_REALM, or set AUTH_ISSUER_URL or AUTH_TOKEN_URL/)

  const dead = await check({ ...s.env, AUTH_URL: `http://127.0.0.1:${await freePort()}` })
  t.equal(dead.code, CHECK_EXIT.grant)
  t.match(dead.output, /token request failed: ECONNREFUSED\. the auth server cannot be reached from here/)

  const viaProxy = await check({ ...s.env, AUTH_URL: 'http://auth.invalid', HTTP_PROXY: `http://127.0.0.1:${await freePort()}` })
  t.equal(viaProxy.code, CHECK_EXIT.grant)
  t.match(viaProxy.output, /cannot be reached through the egress proxy: check HTTPS_PROXY\/HTTP_PROXY and NO_PROXY/)

  const dir = t.testdir({})
  const run = (...args: string[]): void => { execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' }) }
  run('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'key.pem', '-out', 'cert.pem', '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1')
  const https = createHttpsServer({ key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) }, (_req, res) => res.end('{}'))
  await new Promise<void>((resolve) => https.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { https.closeAllConnections(); https.close() })
  const tls = await check({ ...s.env, AUTH_URL: '', AUTH_TOKEN_URL: `https://127.0.0.1:${(https.address() as AddressInfo).port}/token` })
  t.equal(tls.code, CHECK_EXIT.grant)
  t.match(tls.output, /FAIL grant: token request failed: [A-Z_]*SELF_SIGNED[A-Z_]*\. TLS trust: .*NODE_EXTRA_CA_CERTS/)
})

t.test('check: an upstream that refuses the token, or cannot be reached, fails the upstream step (exit 5)', async (t) => {
  const s = await servers(t)
  const refused = await check(s.env, ['--path', '/_status/403'])
  t.equal(refused.code, CHECK_EXIT.upstream)
  t.match(refused.lines.at(-2), /^FAIL upstream: GET \S+\/api\/_status\/403 answered 403: the upstream refuses the token\. Check what it expects/)
  t.match(refused.lines.at(-1), /^ok {3}session: session ended/, 'the session is ended even so')
  t.equal(s.tokenServer.activeSessions(), 0)

  const other = await check(s.env, ['--path', '/_status/404'])
  t.equal(other.code, CHECK_EXIT.ok, 'a 404 still proves the upstream was reached and took the token')

  const failing = await check(s.env, ['--path', '/_status/500'])
  t.equal(failing.code, CHECK_EXIT.upstream)

  const dead = await check({ ...s.env, BASE_URL: `http://127.0.0.1:${await freePort()}` })
  t.equal(dead.code, CHECK_EXIT.upstream)
  t.match(dead.lines.at(-2), /^FAIL upstream: GET http:\/\/127\.0\.0\.1:\d+\/: the sidecar answered 502 upstream_unreachable \(ECONNREFUSED\)\. the upstream \(BASE_URL\) cannot be reached from here/)

  const confined = await check(s.env, ['--path', '/a%00b'])
  t.equal(confined.code, CHECK_EXIT.upstream)
  t.match(confined.output, /the sidecar answered 400 bad_request/)
})

/** An upstream that answers every request with `answer(socket)`, byte for byte. */
async function rawUpstream (t: Test, answer: (socket: import('node:net').Socket) => void): Promise<string> {
  const server = createServer((socket) => {
    socket.on('error', () => {})
    socket.once('data', () => answer(socket))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.close() })
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

t.test('check against a hostile upstream: interim answers forever, a body dripped or endless: done within UPSTREAM_TIMEOUT_MS, memory bounded', async (t) => {
  const s = await servers(t)
  const hints = await rawUpstream(t, (socket) => {
    const timer = setInterval(() => { if (!socket.destroyed) socket.write('HTTP/1.1 103 Early Hints\r\n\r\n') }, 300)
    socket.on('close', () => clearInterval(timer))
  })
  const drip = await rawUpstream(t, (socket) => {
    socket.write('HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n')
    const timer = setInterval(() => { if (!socket.destroyed) socket.write('x') }, 300)
    socket.on('close', () => clearInterval(timer))
  })
  const endless = await rawUpstream(t, (socket) => {
    socket.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n')
    const chunk = `10000\r\n${'y'.repeat(0x10000)}\r\n`
    const flood = (): void => {
      while (!socket.destroyed && socket.write(chunk)) {}
      if (!socket.destroyed) socket.once('drain', flood)
    }
    flood()
  })
  for (const [name, url, expected] of [['103s', hints, CHECK_EXIT.upstream], ['a dripped body', drip, CHECK_EXIT.ok], ['an endless body', endless, CHECK_EXIT.ok]] as const) {
    const rss = process.memoryUsage().rss
    const started = Date.now()
    const { code, output } = await check({ ...s.env, BASE_URL: url, UPSTREAM_TIMEOUT_MS: '1500' })
    t.equal(code, expected, `${name}: ${output.split('\n').at(-3)}`)
    t.ok(Date.now() - started < 6_000, `${name}: done in ${Date.now() - started} ms`)
    t.ok(process.memoryUsage().rss - rss < 100 * 1024 * 1024, `${name}: RSS grew ${Math.round((process.memoryUsage().rss - rss) / 1048576)} MB`)
  }
})

t.test('check: an upstream that refuses the request itself (431, 413, 407) fails the upstream step', async (t) => {
  const s = await servers(t)
  for (const status of [431, 413, 407]) {
    const { code, lines } = await check(s.env, ['--path', `/_status/${status}`])
    t.equal(code, CHECK_EXIT.upstream, String(status))
    t.match(lines.at(-2), new RegExp(`^FAIL upstream: GET \\S+ answered ${status} in \\d+ ms: reached, but it refuses the request itself`))
  }
})

t.test('check: a DPoP-bound token while AUTH_DPOP is off fails the grant, and it is not sent as a bearer token', async (t) => {
  const s = await servers(t, {}, [{ status: 200, body: JSON.stringify({ access_token: 'a.b.c', token_type: 'DPoP', expires_in: 300 }) }])
  const { code, lines } = await check(s.env)
  t.equal(code, CHECK_EXIT.grant)
  t.match(lines.at(-1), /^FAIL grant: the token endpoint answered with a DPoP-bound token, which only works with its proof: set AUTH_DPOP=true/)
  t.equal(s.upstream.received.length, 0)
})

t.test('check and shutdown: an end-session or revocation endpoint discovered on another origin is not sent anything', async (t) => {
  const s = await servers(t)
  const collected: string[] = []
  const collector = createHttpServer((req, res) => { collected.push(req.url ?? ''); req.resume(); res.end() })
  await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { collector.close() })
  const elsewhere = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`
  // an issuer whose document names the real token endpoint, and end-session and revocation on the collector
  const issuer = createHttpServer((_req, res) => {
    const self = `http://127.0.0.1:${(issuer.address() as AddressInfo).port}`
    res.setHeader('content-type', 'application/json')
    res.end(JSON.stringify({ issuer: self, token_endpoint: s.tokenServer.tokenUrl, end_session_endpoint: `${elsewhere}/logout`, revocation_endpoint: `${elsewhere}/revoke` }))
  })
  await new Promise<void>((resolve) => issuer.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { issuer.close() })
  const env = { ...s.env, AUTH_URL: '', AUTH_ISSUER_URL: `http://127.0.0.1:${(issuer.address() as AddressInfo).port}` }
  const { lines } = await check(env)
  t.match(lines[1], /end_session_endpoint http:\/\/127\.0\.0\.1:\d+\/logout is on another origin than the issuer and the token endpoint: not used/)
  t.match(lines.at(-1), /^skip session: session left open: discovery named no end-session or revocation endpoint on the issuer's or the token endpoint's origin$/)
  const sidecar = start({ ...env, PROXY_PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1' }, t.testdir({}))
  await untilToken(sidecar)
  sidecar.child.kill('SIGTERM')
  t.equal(await sidecar.exited, 0)
  t.match(sidecar.stdout.join('\n'), /"event":"discovery".*end_session_endpoint http:\/\/127\.0\.0\.1:\d+\/logout is on another origin/, 'the sidecar warns of it too')
  t.same(collected, [], 'the collector got nothing, from check or from the sidecar\'s shutdown')
})

t.test('check: a configuration error is exit 1 with every problem; bad arguments exit 2', async (t) => {
  const config = await check({ BASE_URL: 'nope', AUTH_PASSWORD: 'do-not-echo' })
  t.equal(config.code, CHECK_EXIT.configuration)
  t.match(config.lines[0], /^FAIL configuration: BASE_URL must be an absolute http or https URL; /)
  t.notMatch(config.output, 'do-not-echo')
  t.equal((await check({}, ['--path', 'no-slash'])).code, CHECK_EXIT.usage)
  t.equal((await check({}, ['--frobnicate'])).code, CHECK_EXIT.usage)
  t.equal((await check({}, ['--method', 'FROB'])).code, CHECK_EXIT.usage, 'a method the proxy has no route for')
  t.equal((await check({}, ['--method', 'TRACE'])).code, CHECK_EXIT.usage, 'a method the proxy refuses')
  const help = await check({}, ['--help'])
  t.equal(help.code, 0)
  t.match(help.output, /Exit codes: 0 all passed/)
})

t.test('AUTH_LOGOUT_ON_SHUTDOWN=false: check leaves the session, as the sidecar would', async (t) => {
  const s = await servers(t)
  const { code, lines } = await check({ ...s.env, AUTH_LOGOUT_ON_SHUTDOWN: 'false' })
  t.equal(code, 0)
  t.match(lines.at(-1), /^skip session: left open: AUTH_LOGOUT_ON_SHUTDOWN=false/)
  t.equal(s.tokenServer.activeSessions(), 1)
})

t.test('node dist/main.js check: the same from the built entry point, no listener, exit code from the failing step', async (t) => {
  const s = await servers(t)
  const dir = t.testdir({})
  // both at once: neither listens, so neither is in the other's way
  const ok = start(s.env, dir, ['check'])
  const bad = start({ ...s.env, AUTH_PASSWORD: 'nope' }, dir, ['check'])
  const [okCode, badCode] = await Promise.all([ok.exited, bad.exited])
  t.equal(okCode, 0, ok.stderr.join(''))
  t.equal(ok.stdout.filter((l) => l.startsWith('ok ')).length, 4)
  t.equal(s.tokenServer.activeSessions(), 0)
  t.equal(badCode, CHECK_EXIT.grant)
  t.match(bad.stdout.join('\n'), /FAIL grant/)
})

t.test('check: discovery that fails is its own step, exit 3', async (t) => {
  const s = await servers(t, {}, [{ status: 404, body: '{"error":"Realm does not exist"}' }])
  const { code, lines } = await check({ ...s.env, AUTH_URL: '', AUTH_ISSUER_URL: s.tokenServer.issuer })
  t.equal(code, CHECK_EXIT.discovery)
  t.match(lines.at(-1), /^FAIL discovery: discovery: .*\/\.well-known\/openid-configuration answered 404/)
  t.equal(s.tokenServer.grants.length, 0, 'no grant after a failed discovery')
})

t.test('check: a session that cannot be ended is its own step, exit 6, after the other steps passed', async (t) => {
  // the grant is answered as usual, the end-session and revocation requests with a 500
  const failure = { status: 500, body: '{"error":"unknown_error"}' }
  const s = await servers(t, {}, [{ delayMs: 0 }, failure, failure])
  const { code, lines, output } = await check(s.env)
  t.equal(code, CHECK_EXIT.session, output)
  t.match(lines.at(-2), /^ok {3}upstream:/)
  t.match(lines.at(-1), /^FAIL session: session not ended: the end-session endpoint .*\/logout answered 500 unknown_error; the revocation endpoint .*\/revoke answered 500 unknown_error/)
  noSecrets(t, output, s.tokenServer)
})

t.test('check in DPoP mode: the token\'s type and key, then a proof the upstream accepts (after its nonce)', async (t) => {
  const s = await servers(t, { dpop: { required: true, nonce: true } })
  const api = await dpopApi(t, () => s.tokenServer, { nonce: true })
  const { code, lines, output } = await check({ ...s.env, BASE_URL: `${api.url}/v1`, AUTH_DPOP: 'true' })
  t.equal(code, CHECK_EXIT.ok, output)
  t.match(lines[0], /, DPoP-bound tokens \(ES256 key\), /)
  const jkt = s.tokenServer.grants.at(-1)!.jkt!
  t.match(lines[1], `; token_type DPoP, bound to the sidecar's ES256 key ${jkt}, its cnf.jkt names it`)
  t.match(lines[2], /^ok {3}upstream: GET http:\/\/127\.0\.0\.1:\d+\/v1 answered 200 in \d+ ms: reached, DPoP-bound token and proof accepted$/)
  t.same(api.calls.map((c) => c.status), [401, 200], 'the nonce asked for, and sent')
  t.equal(s.tokenServer.logouts[0]!.jkt, jkt, 'the session ended with a proof')
  noSecrets(t, output, s.tokenServer)
})

t.test('check in DPoP mode: an upstream that refuses the proof, or takes bearer tokens only, is told apart', async (t) => {
  const s = await servers(t, { dpop: { required: true } })
  const refusing = createHttpServer((req, res) => {
    req.resume()
    res.writeHead(401, { 'www-authenticate': req.url === '/proof' ? 'DPoP algs="ES256", error="invalid_dpop_proof"' : 'Bearer realm="api"' })
    res.end()
  })
  await new Promise<void>((resolve) => refusing.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { refusing.close() })
  const env = { ...s.env, BASE_URL: `http://127.0.0.1:${(refusing.address() as AddressInfo).port}`, AUTH_DPOP: 'true' }
  const proof = await check(env, ['--path', '/proof'])
  t.equal(proof.code, CHECK_EXIT.upstream)
  t.match(proof.lines.at(-2), /^FAIL upstream: GET \S+\/proof answered 401: the upstream refuses the DPoP proof \(invalid_dpop_proof\)/)
  const bearer = await check(env, ['--path', '/bearer'])
  t.match(bearer.lines.at(-2), /^FAIL upstream: GET \S+\/bearer answered 401 without a DPoP challenge: .*set AUTH_DPOP=false/)
})

t.test('check with routes: every credential\'s grant or exchange and every route\'s upstream, each line naming its route; the failing one named', async (t) => {
  const s = await servers(t, { exchange: { 'legacy-app': ['reports-api'] } })
  const reports = new FakeUpstream(s.tokenServer)
  await reports.listen()
  t.teardown(async () => await reports.close())
  const env = {
    ...s.env,
    ROUTE_REPORTS_BASE_URL: `${reports.url}/r`,
    ROUTE_REPORTS_PATH: '/reports',
    ROUTE_REPORTS_AUTH_EXCHANGE_AUDIENCE: 'reports-api',
    ROUTE_SHARED_BASE_URL: reports.url,
    ROUTE_SHARED_PORT: '0'
  }
  const { code, lines, output } = await check(env, ['--path', '/_verify'])
  t.equal(code, CHECK_EXIT.ok, output)
  t.match(lines[0], /^ok {3}configuration: oauth2, .*; route reports on path \/reports to http:\/\/\S+\/r, token exchange for audience reports-api; route shared on port 0 to http:\/\/\S+, route default's credential$/)
  t.match(lines[1], /^ok {3}grant \(route default\): password grant at /)
  t.match(lines[2], /^ok {3}exchange \(route reports\): token exchange at \S+ of route default's token for audience reports-api: access token for 300 s, no refresh token .*audience reports-api/)
  t.match(lines[3], /^ok {3}upstream \(route default\): GET \S+\/api\/_verify answered 200/)
  t.match(lines[4], /^ok {3}upstream \(route reports\): GET \S+\/r\/_verify answered 200/)
  t.match(lines[5], /^ok {3}upstream \(route shared\): GET \S+\/_verify answered 200/)
  t.match(lines[6], /^ok {3}session \(route default\): session ended/)
  t.equal(lines.length, 7)
  noSecrets(t, output, s.tokenServer)

  const refused = await check({ ...env, ROUTE_REPORTS_AUTH_EXCHANGE_AUDIENCE: 'finance-api' }, ['--path', '/_verify'])
  t.equal(refused.code, CHECK_EXIT.grant)
  t.match(refused.output, /^FAIL exchange \(route reports\): token endpoint answered 400 invalid_request \(Requested audience not available: finance-api\)/m)
  t.match(refused.output, /^ok {3}upstream \(route shared\)/m, 'the other routes are still checked')
  t.notMatch(refused.output, /upstream \(route reports\)/, 'the route without a token is not tried')
})

t.test('check: each client certificate said, and a token bound to one the upstream does not get is a failure named as such', async (t) => {
  const ca = TestCa.create(join(t.testdir({}), 'ca'))
  const server = ca.issue('server', { cn: '127.0.0.1', san: 'IP:127.0.0.1' })
  const toKeycloak = ca.issue('auth', { cn: 'sidecar-auth' })
  const toApi = ca.issue('upstream', { cn: 'sidecar-upstream' })
  const tls = { key: server.key, cert: server.cert, ca: readFileSync(ca.caFile, 'utf8') }
  const tokenServer = new TokenServer({ tls, mtls: { bound: true }, tlsClients: { 'legacy-app': 'sidecar-auth' } })
  await tokenServer.listen()
  t.teardown(async () => await tokenServer.close())
  const upstream = new FakeUpstream(tokenServer, tls)
  await upstream.listen()
  t.teardown(async () => await upstream.close())
  const env = {
    BASE_URL: upstream.url,
    AUTH_TOKEN_URL: tokenServer.tokenUrl,
    AUTH_CLIENT_ID: 'legacy-app',
    AUTH_GRANT_TYPE: 'client_credentials',
    AUTH_CLIENT_AUTH: 'tls_client_auth',
    AUTH_TLS_CERT_FILE: toKeycloak.certFile,
    AUTH_TLS_KEY_FILE: toKeycloak.keyFile,
    AUTH_TLS_CA_FILE: ca.caFile,
    UPSTREAM_TLS_CERT_FILE: toApi.certFile,
    UPSTREAM_TLS_KEY_FILE: toApi.keyFile,
    UPSTREAM_TLS_CA_FILE: ca.caFile
  }
  const split = await check(env)
  t.equal(split.code, CHECK_EXIT.grant, split.output)
  t.match(split.output, /^ok {3}certificate auth: subject CN=sidecar-auth, expires \d{4}-\S+, x5t#S256 [\w-]{43}$/m)
  t.match(split.output, /^ok {3}certificate upstream: subject CN=sidecar-upstream, /m)
  t.match(split.output, /^FAIL grant: client_credentials grant at \S+ \(tls_client_auth\): .*bound to the client certificate x5t#S256 [\w-]{43}, but the upstream gets x5t#S256 [\w-]{43}: the token will be refused there\. Give UPSTREAM_TLS_CERT_FILE/m)
  t.notMatch(split.output, /PRIVATE KEY/)

  const same = await check({ ...env, UPSTREAM_TLS_CERT_FILE: toKeycloak.certFile, UPSTREAM_TLS_KEY_FILE: toKeycloak.keyFile })
  t.equal(same.code, CHECK_EXIT.ok, same.output)
  t.match(same.output, /bound to the client certificate \(cnf x5t#S256 [\w-]{43}\), which the upstream gets too/)
  t.match(same.output, /^ok {3}upstream: GET https:\/\/127\.0\.0\.1:\d+\/ answered 200/m)
})

t.test('check: an upstream answering with a redirect (a login page) fails the upstream step, naming where it points but nothing after the origin', async (t) => {
  const s = await servers(t)
  const redirecting = createHttpServer((req, res) => {
    const location = req.url === '/api/relative' ? '/login?next=%2Fapi' : 'https://login.example.com/authorize?state=eyJzZWNyZXQiOiJ4In0.abc&code=leaky-code-123'
    res.writeHead(req.url === '/api/none' ? 303 : 302, req.url === '/api/none' ? {} : { location }).end()
  })
  await new Promise<void>((resolve) => redirecting.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { redirecting.close() })
  const base = `http://127.0.0.1:${(redirecting.address() as AddressInfo).port}`
  const env = { ...s.env, BASE_URL: `${base}/api` }

  const away = await check(env)
  t.equal(away.code, CHECK_EXIT.upstream)
  t.match(away.lines.at(-2), /^FAIL upstream: GET http:\/\/127\.0\.0\.1:\d+\/api answered 302 in \d+ ms: a redirect to https:\/\/login\.example\.com, which is not an accepted token/)
  t.notMatch(away.output, /authorize|state=|leaky-code/, 'nothing of the Location but its origin')
  t.match(away.lines.at(-1), /^ok {3}session: session ended/, 'the session is ended even so')

  const within = await check(env, ['--path', '/relative'])
  t.equal(within.code, CHECK_EXIT.upstream)
  t.match(within.output, new RegExp(`answered 302 in \\d+ ms: a redirect within ${base.replace(/\./g, '\\.')}, which is not an accepted token`))
  t.notMatch(within.output, /login\?next/)

  const bare = await check(env, ['--path', '/none'])
  t.equal(bare.code, CHECK_EXIT.upstream)
  t.match(bare.output, /answered 303 in \d+ ms: a redirect without a Location/)
})

t.test('check: a refused grant names what to change: AUTH_GRANT_TYPE, the client authentication settings, AUTH_SCOPE', async (t) => {
  const refusal = (error: string, description: string): Fault => ({ status: 400, body: JSON.stringify({ error, error_description: description }) })
  const cases: Array<[Fault, Record<string, string>, RegExp]> = [
    [refusal('unsupported_grant_type', 'grant type not supported'), {}, /^FAIL grant: token endpoint answered 400 unsupported_grant_type \(grant type not supported\): the server does not offer the password grant; set AUTH_GRANT_TYPE to one it does \(client_credentials is the one most servers offer a service\)$/],
    [{ ...refusal('invalid_client', 'client authentication failed'), status: 401 }, { AUTH_CLIENT_AUTH: 'client_secret_basic' }, /^FAIL grant: token endpoint answered 401 invalid_client \(client authentication failed\)\. Check AUTH_CLIENT_ID and AUTH_CLIENT_SECRET, and whether the server takes client_secret_basic \(AUTH_CLIENT_AUTH\)$/],
    [refusal('invalid_scope', 'unknown scope'), { AUTH_SCOPE: 'orders:read' }, /^FAIL grant: token endpoint answered 400 invalid_scope \(unknown scope\)\. Check AUTH_SCOPE \("orders:read"\): the server refuses it, or a part of it, for this client$/]
  ]
  for (const [fault, env, said] of cases) {
    const s = await servers(t, {}, [fault])
    const { code, lines, output } = await check({ ...s.env, ...env })
    t.equal(code, CHECK_EXIT.grant)
    t.match(lines.at(-1), said)
    noSecrets(t, output, s.tokenServer)
  }
})

t.test('check: a revocation endpoint that does not revoke access tokens (400 unsupported_token_type) has nothing to end: skip, exit 0', async (t) => {
  // discovery and the grant as usual, then the revocation refused
  const s = await servers(t, {}, [{ delayMs: 0 }, { delayMs: 0 }, { status: 400, body: JSON.stringify({ error: 'unsupported_token_type', error_description: 'access tokens cannot be revoked' }) }])
  const { code, lines } = await check({ ...s.env, AUTH_URL: '', AUTH_ISSUER_URL: s.tokenServer.issuer, AUTH_GRANT_TYPE: 'client_credentials', AUTH_USERNAME: '', AUTH_PASSWORD: '' })
  t.equal(code, CHECK_EXIT.ok)
  t.match(lines.at(-1), /^skip session: nothing to end: the revocation endpoint \S+\/revoke answered 400 unsupported_token_type \(it does not revoke access tokens\)$/)
  t.match(s.tokenServer.logouts, [{ endpoint: 'revoke', status: 400 }])
})
