import t, { type Test } from 'tap'
import { TokenUnavailableError } from '../../src/errors.js'
import { MAX_TIMER_MS, systemClock } from '../../src/token/clock.js'
import { SecretScrubber } from '../../src/secrets.js'
import { ClientAuthenticator } from '../../src/token/client-auth.js'
import { TokenLifecycle } from '../../src/token/lifecycle.js'
import { OwnGrants } from '../../src/token/own-grants.js'
import { OAuthClient } from '../../src/token/oauth-client.js'
import { until } from '../helpers/build.js'
import { FakeClock, settle } from '../helpers/fake-clock.js'
import { captureLogger } from '../helpers/log.js'
import { keycloakError, ScriptedEndpoint, tokenAnswer, type AuthAnswer } from '../helpers/scripted-endpoint.js'

const PASSWORD = 's3cret-Passw0rd'
const CLIENT_SECRET = 'client-s3cret-value'
/** every log line of every test, searched for secrets by the last test */
const allLines: string[] = []

function setup (t: Test, random = 0.5) {
  const clock = new FakeClock()
  const endpoint = new ScriptedEndpoint()
  const log = captureLogger()
  const secrets = new SecretScrubber()
  let creds = { username: 'svc', password: PASSWORD, clientSecret: CLIENT_SECRET }
  let changed: (() => void) | undefined
  const credentials = { read: async () => creds, onChange: (l: () => void) => { changed = l } }
  const server = new OAuthClient({
    tokenUrl: 'http://auth.invalid/token',
    grantType: 'password',
    clientId: 'legacy-app',
    client: new ClientAuthenticator({ clientId: 'legacy-app', clientAuth: 'client_secret_post', onSecret: (v) => secrets.addToken(v) }),
    extras: { scope: 'openid' },
    credentials,
    fetch: endpoint.fetch,
    timeoutMs: 10_000,
    clock,
    log: log.logger,
    secrets
  })
  const manager = new TokenLifecycle({
    source: new OwnGrants({ server, credentials, clock, log: log.logger, secrets }),
    log: log.logger,
    waitMs: 5_000,
    retryMinMs: 1_000,
    retryMaxMs: 30_000,
    rejectedRetryMs: 60_000,
    clock,
    random: () => random,
    secrets
  })
  t.teardown(() => {
    manager.stop()
    allLines.push(...log.lines)
  })
  return {
    clock,
    endpoint,
    manager,
    log,
    rotate (password: string) { creds = { ...creds, password }; changed?.() }
  }
}

t.test('password grant at start; not ready until it succeeds', async (t) => {
  const { clock, endpoint, manager } = setup(t)
  const first = tokenAnswer(300)
  endpoint.queue.push(first)
  t.equal(manager.ready(), false)
  manager.start()
  t.equal(manager.ready(), false, 'not ready while the grant is in flight')
  await clock.advance(0)
  t.equal(manager.ready(), true)
  t.equal(manager.current()?.header, ScriptedEndpoint.header(first))
  t.same(endpoint.calls[0]!.form, {
    grant_type: 'password', client_id: 'legacy-app', username: 'svc', password: PASSWORD, client_secret: CLIENT_SECRET, scope: 'openid'
  })
})

t.test('start-up failures are retried with capped, growing backoff, and never give up', async (t) => {
  const { clock, endpoint, manager, log } = setup(t, 1)
  endpoint.fallback = () => ({ status: 503, body: '<html>Service Unavailable</html>' })
  manager.start()
  await clock.advance(0)
  const gaps: number[] = []
  for (let i = 0; i < 8; i++) {
    gaps.push(clock.pending[0]!)
    await clock.advance(clock.pending[0]!)
  }
  t.same(gaps, [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000], 'doubles from TOKEN_RETRY_MIN_MS up to TOKEN_RETRY_MAX_MS')
  t.equal(endpoint.calls.length, 9)
  t.equal(manager.ready(), false)
  const warnings = log.records().filter((r) => r.msg === 'token request failed')
  t.equal(warnings.length, 1, 'the same failure is logged once per episode at warn')
  endpoint.fallback = () => tokenAnswer()
  await clock.advance(30_000)
  t.equal(manager.ready(), true)
  t.ok(log.records().some((r) => r.msg === 'token obtained after failed attempts' && r.failedAttempts === 9))
})

t.test('renewal starts after half the lifetime and is planned to finish before 90%', async (t) => {
  for (const random of [0, 0.5, 0.999]) {
    const { clock, endpoint, manager } = setup(t, random)
    endpoint.queue.push(tokenAnswer(100))
    manager.start()
    await clock.advance(0)
    await clock.advance(49_999)
    t.equal(endpoint.calls.length, 1, `no renewal before 50% (random ${random})`)
    await clock.advance(75_001 - 49_999)
    t.equal(endpoint.calls.length, 2, `renewal by 75% (random ${random})`)
    t.equal(endpoint.calls[1]!.form.grant_type, 'refresh_token')
  }
})

t.test('the refresh answer replaces both tokens; a refresh token is never used twice', async (t) => {
  const { clock, endpoint, manager } = setup(t)
  manager.start()
  await clock.advance(0)
  for (let i = 0; i < 5; i++) await clock.advance(300_000)
  const refreshCalls = endpoint.calls.filter((c) => c.form.grant_type === 'refresh_token')
  t.ok(refreshCalls.length >= 4)
  const used = refreshCalls.map((c) => c.form.refresh_token)
  t.equal(new Set(used).size, used.length, 'each refresh token sent once')
  for (let i = 1; i < endpoint.calls.length; i++) {
    const issued = (JSON.parse((endpoint.answers[i - 1] as { body: string }).body) as { refresh_token: string }).refresh_token
    t.equal(endpoint.calls[i]!.form.refresh_token, issued, `renewal ${i} uses the newest refresh token`)
  }
  t.same(refreshCalls[0]!.form, { grant_type: 'refresh_token', refresh_token: used[0], client_id: 'legacy-app', client_secret: CLIENT_SECRET, scope: 'openid' })
})

t.test('refresh answered invalid_grant: falls back to the password grant at once', async (t) => {
  for (const description of ['Token is not active', 'Session not active', 'Stale token']) {
    const { clock, endpoint, manager } = setup(t)
    endpoint.queue.push(tokenAnswer(100), keycloakError(400, 'invalid_grant', description))
    const next = tokenAnswer(100)
    endpoint.queue.push(next)
    manager.start()
    await clock.advance(0)
    await clock.advance(75_000)
    t.same(endpoint.grants(), ['password', 'refresh_token', 'password'], description)
    t.equal(manager.current()?.header, ScriptedEndpoint.header(next))
  }
})

t.test('a refresh answered 200 without a usable token (Keycloak at the end of an SSO session: expires_in 0): the password grant at once', async (t) => {
  const { clock, endpoint, manager } = setup(t)
  endpoint.queue.push(tokenAnswer(100), tokenAnswer(0, 0))
  const next = tokenAnswer(100)
  endpoint.queue.push(next)
  manager.start()
  await clock.advance(0)
  await clock.advance(75_000)
  t.same(endpoint.grants(), ['password', 'refresh_token', 'password'])
  t.equal(manager.current()?.header, ScriptedEndpoint.header(next), 'not the slow pace of an unusable password grant')
})

t.test('a refresh token that lapses before the renewal is not used', async (t) => {
  const { clock, endpoint, manager } = setup(t)
  endpoint.queue.push(tokenAnswer(100, 30)) // refresh lapses at 30 s, renewal is at 50-75 s
  manager.start()
  await clock.advance(0)
  await clock.advance(75_000)
  t.same(endpoint.grants(), ['password', 'password'])
})

t.test('refresh_expires_in 0 (offline token) means no lapse', async (t) => {
  const { clock, endpoint, manager } = setup(t)
  endpoint.fallback = () => tokenAnswer(100, 0)
  manager.start()
  await clock.advance(0)
  await clock.advance(10 * 86_400_000 / 1000) // 864 s: many renewals
  t.same(new Set(endpoint.grants().slice(1)), new Set(['refresh_token']))
})

t.test('no refresh token: renewal uses the password grant', async (t) => {
  const { clock, endpoint, manager } = setup(t)
  endpoint.fallback = () => tokenAnswer(100, undefined, false)
  manager.start()
  await clock.advance(0)
  await clock.advance(75_000)
  t.same(endpoint.grants(), ['password', 'password'])
})

t.test('auth-server outage: the current token stays in use while valid, with backoff', async (t) => {
  const { clock, endpoint, manager } = setup(t, 0)
  const first = tokenAnswer(100)
  endpoint.queue.push(first)
  manager.start()
  await clock.advance(0)
  endpoint.fallback = () => new Error('connect ECONNREFUSED 127.0.0.1:8443')
  await clock.advance(50_000) // renewal fails
  t.equal(manager.current()?.header, ScriptedEndpoint.header(first), 'still the old token')
  await clock.advance(30_000)
  t.equal(manager.current()?.header, ScriptedEndpoint.header(first), 'still valid at 80%')
  const attempts = endpoint.calls.length
  t.ok(attempts >= 4 && attempts <= 7, `retried with backoff, not in a loop (${attempts} calls)`)
  await clock.advance(15_000)
  t.equal(manager.current()?.header, undefined, 'not handed out in the last 5% of its life')
  t.equal(manager.ready(), false)
  const waiting = manager.authorize().catch((e: unknown) => e)
  await clock.advance(5_000)
  t.type(await waiting, TokenUnavailableError, 'a request gets 503 within TOKEN_WAIT_MS')
})

t.test('rejected credentials: error log, retried about once a minute, at once when the secret file changes', async (t) => {
  const { clock, endpoint, manager, log, rotate } = setup(t)
  endpoint.fallback = () => keycloakError(401, 'invalid_grant', 'Invalid user credentials')
  manager.start()
  await clock.advance(0)
  await clock.advance(53_000)
  t.equal(endpoint.calls.length, 1, 'no retry within 53 s')
  await clock.advance(14_000)
  t.equal(endpoint.calls.length, 2, 'retried after about a minute')
  const errors = log.records().filter((r) => r.level === 50)
  t.equal(errors.length, 2)
  t.match(errors[0], { grant: 'password', outcome: 'rejected', reason: 'token endpoint answered 401 invalid_grant (Invalid user credentials)' })
  endpoint.fallback = () => tokenAnswer()
  rotate('new-password')
  await clock.advance(0)
  t.equal(endpoint.calls.length, 3, 'tried at once after the change')
  t.equal(endpoint.calls[2]!.form.password, 'new-password')
  t.equal(manager.ready(), true)
})

t.test('invalid_client and unauthorized_client on the password grant are also retried slowly', async (t) => {
  for (const [status, error] of [[401, 'invalid_client'], [400, 'unauthorized_client'], [400, 'invalid_scope']] as const) {
    const { clock, endpoint, manager } = setup(t)
    endpoint.fallback = () => keycloakError(status, error, 'x')
    manager.start()
    await clock.advance(0)
    await clock.advance(50_000)
    t.equal(endpoint.calls.length, 1, error)
  }
})

t.test('"Account is not fully set up" is reported as a configuration error', async (t) => {
  const { clock, endpoint, manager, log } = setup(t)
  endpoint.fallback = () => keycloakError(400, 'invalid_grant', 'Account is not fully set up')
  manager.start()
  await clock.advance(0)
  t.match(log.records().find((r) => r.level === 50)?.reason, /pending required actions/)
})

t.test('100 concurrent callers cause one grant', async (t) => {
  const { clock, endpoint, manager } = setup(t)
  const answer = tokenAnswer()
  endpoint.queue.push(answer)
  const waiting = Array.from({ length: 100 }, () => manager.authorize())
  manager.start()
  for (let i = 0; i < 100; i++) waiting.push(manager.authorize())
  await clock.advance(0)
  const headers = await Promise.all(waiting)
  t.equal(endpoint.calls.length, 1)
  t.equal(endpoint.maxInflight, 1)
  t.same(new Set(headers.map((a) => a.header)), new Set([ScriptedEndpoint.header(answer)]))
})

t.test('waiting is bounded: a hanging grant gives 503 after TOKEN_WAIT_MS, and is cut at TOKEN_TIMEOUT_MS', async (t) => {
  const { clock, endpoint, manager, log } = setup(t)
  endpoint.queue.push('hang')
  manager.start()
  const waiting = manager.authorize()
  let outcome: unknown
  waiting.then((v) => { outcome = v }, (e: unknown) => { outcome = e })
  await clock.advance(4_999)
  t.equal(outcome, undefined)
  await clock.advance(1)
  t.type(outcome, TokenUnavailableError)
  t.ok((outcome as TokenUnavailableError).retryAfterSeconds >= 1)
  t.equal(endpoint.calls[0]!.signal.aborted, false)
  await clock.advance(5_000)
  t.equal(endpoint.calls[0]!.signal.aborted, true, 'aborted at TOKEN_TIMEOUT_MS')
  t.match(log.records().find((r) => r.msg === 'token request failed')?.reason, 'token request timed out after 10000 ms')
  await clock.advance(1_000)
  t.equal(endpoint.calls.length, 2, 'then retried')
})

t.test('requests arriving during a backoff longer than the wait bound get 503 at once', async (t) => {
  const { clock, endpoint, manager } = setup(t)
  endpoint.fallback = () => keycloakError(401, 'invalid_grant', 'Invalid user credentials')
  manager.start()
  await clock.advance(0)
  const err = await manager.authorize().catch((e: unknown) => e)
  t.type(err, TokenUnavailableError)
  t.ok((err as TokenUnavailableError).retryAfterSeconds > 50)
  t.equal(endpoint.calls.length, 1, 'no extra grant caused by the request')
})

t.test('a 200 without a usable token is an error, retried first within seconds (a glitch passes), never a crash', async (t) => {
  const cases: Array<[string, string]> = [
    ['{"a":', 'not JSON'],
    ['[]', 'not an object'],
    ['{"expires_in":300}', 'access_token is missing'],
    ['{"access_token":"abc def","expires_in":300}', 'characters not allowed'],
    ['{"access_token":"abc","expires_in":"soon"}', 'expires_in is missing or not a number'],
    ['{"access_token":"abc","expires_in":0}', 'at least 1 second'],
    ['{"access_token":"abc","expires_in":-5}', 'at least 1 second'],
    ['{"access_token":"abc","expires_in":300,"refresh_token":"r","refresh_expires_in":-1}', 'refresh_expires_in'],
    ['{"access_token":"abc","expires_in":300}', 'token_type'],
    ['{"access_token":"abc","token_type":"mac","expires_in":300}', 'token_type']
  ]
  for (const [body, reason] of cases) {
    const { clock, endpoint, manager, log } = setup(t)
    endpoint.queue.push({ status: 200, body })
    manager.start()
    await clock.advance(0)
    t.equal(manager.ready(), false, body)
    t.match(log.records().find((r) => r.event === 'token' && r.reason !== undefined)?.reason, reason)
    await clock.advance(999)
    t.equal(endpoint.calls.length, 2, `retried within a second: ${body}`)
    t.equal(manager.ready(), true)
  }
})

t.test('answers that stay unusable are retried ever more slowly, up to the pace of refused credentials', async (t) => {
  const { clock, endpoint, manager } = setup(t, 1)
  endpoint.fallback = () => ({ status: 200, body: '{"access_token":"abc","expires_in":0}' })
  manager.start()
  await clock.advance(0)
  const gaps: number[] = []
  for (let i = 0; i < 9; i++) {
    gaps.push(clock.pending[0]!)
    await clock.advance(clock.pending[0]!)
  }
  t.same(gaps, [1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000], 'from TOKEN_RETRY_MIN_MS, doubling up to TOKEN_REJECTED_RETRY_MS')
})

t.test('lifetimes sent as numeric strings ("3599", as some servers do) are taken as numbers', async (t) => {
  const { clock, endpoint, manager } = setup(t, 0)
  endpoint.queue.push({ status: 200, body: '{"access_token":"abc","token_type":"Bearer","expires_in":"300","refresh_token":"r1","refresh_expires_in":"1800"}' })
  manager.start()
  await clock.advance(0)
  t.equal(manager.ready(), true)
  t.equal(manager.expiresInSeconds(), 300)
  await clock.advance(150_000)
  t.same(endpoint.grants(), ['password', 'refresh_token'], 'renewed at half the lifetime, with the refresh token')
  t.equal(endpoint.calls[1]!.form.refresh_token, 'r1')
})

t.test('a ten-year lifetime neither overflows the timer nor renews at once', async (t) => {
  const { clock, endpoint, manager } = setup(t)
  endpoint.queue.push(tokenAnswer(10 * 365 * 86_400, 0))
  manager.start()
  await clock.advance(0)
  t.ok(clock.pending.every((ms) => ms <= MAX_TIMER_MS), 'timers clamped')
  await clock.advance(MAX_TIMER_MS)
  await clock.advance(MAX_TIMER_MS)
  t.equal(endpoint.calls.length, 1, 'no renewal after 50 days')
  t.equal(manager.ready(), true)
})

t.test('a one-second lifetime renews every half second or more, not in a loop', async (t) => {
  const { clock, endpoint, manager } = setup(t, 0)
  endpoint.fallback = () => tokenAnswer(1)
  manager.start()
  await clock.advance(0)
  await clock.advance(10_000)
  t.equal(endpoint.calls.length, 21)
})

t.test('an upstream 401 drops that token and renews once per rejected token', async (t) => {
  const { clock, endpoint, manager } = setup(t)
  const first = tokenAnswer()
  endpoint.queue.push(first)
  manager.start()
  await clock.advance(0)
  const held = manager.current()!
  for (let i = 0; i < 50; i++) t.equal(manager.answered(held, 401, 'Bearer error="invalid_token"', undefined), 'renewed')
  t.equal(manager.current()?.header, undefined, 'the rejected token is not handed out again')
  const next = await manager.authorize()
  t.not(next.header, held.header)
  t.same(endpoint.grants(), ['password', 'refresh_token'], 'one renewal, by refresh first')
  manager.answered(held, 401, undefined, undefined)
  await clock.advance(0)
  t.equal(endpoint.calls.length, 2, 'a late 401 for the old token causes nothing')
})

t.test('a 401 that says the token lacks a scope is relayed: a new token would lack it too', async (t) => {
  const { clock, endpoint, manager } = setup(t)
  manager.start()
  await clock.advance(0)
  const held = manager.current()!
  t.equal(manager.answered(held, 401, 'Bearer error="insufficient_scope", scope="orders:write"', undefined), 'relay')
  t.equal(manager.current(), held, 'the token is kept')
  await clock.advance(0)
  t.equal(endpoint.calls.length, 1, 'no renewal')
})

t.test('stop() ends timers and the grant in flight', async (t) => {
  const { clock, endpoint, manager } = setup(t)
  endpoint.queue.push('hang')
  manager.start()
  await settle()
  manager.stop()
  t.equal(endpoint.calls[0]!.signal.aborted, true)
  await clock.advance(120_000)
  t.equal(endpoint.calls.length, 1)
  await t.rejects(manager.authorize(), TokenUnavailableError)
})

t.test('an expires_in too large for a timer (1e7, 1e306) renews late, never at once', async (t) => {
  for (const seconds of [1e7, 1e306]) {
    const { clock, endpoint, manager } = setup(t)
    endpoint.queue.push({ status: 200, body: JSON.stringify({ access_token: 'abc', token_type: 'Bearer', expires_in: seconds, refresh_token: 'r', refresh_expires_in: seconds }) })
    manager.start()
    await clock.advance(0)
    t.equal(manager.ready(), true, String(seconds))
    await clock.advance(86_400_000) // a day
    t.equal(endpoint.calls.length, 1, `${seconds}: no renewal within a day`)
  }
})

t.test('401-caused renewals in a row wait 0, 1, 2, 4 ... 60 s, whatever other answers come between; a token obtained on schedule starts over', async (t) => {
  const { clock, endpoint, manager } = setup(t)
  for (let i = 0; i < 40; i++) endpoint.queue.push({ status: 200, body: JSON.stringify({ access_token: `t${i}`, token_type: 'Bearer', expires_in: 3600 }) })
  manager.start()
  await clock.advance(0)
  const renewAt: number[] = []
  const started = clock.now()
  for (let second = 0; second < 200; second++) {
    const held = manager.current()!
    // another path of the same upstream answers 200 between the 401s
    manager.answered(held, 200, undefined, undefined)
    if (manager.answered(held, 401, undefined, undefined) === 'renewed') renewAt.push(Math.round((clock.now() - started) / 1000))
    await clock.advance(1_000)
  }
  t.same(renewAt, [0, 1, 3, 7, 15, 31, 63, 123, 183], 'gaps 1, 2, 4, 8, 16, 32, then 60 s')
  await clock.advance(3_600_000)
  t.same(endpoint.grants().at(-1), 'password', 'a renewal on schedule (these tokens come without a refresh token)')
  t.equal(manager.answered(manager.current()!, 401, undefined, undefined), 'renewed', 'its first 401 renews it at once')
})

t.test('an auth server that echoes the submitted form: no password, client secret or refresh token reaches the log', async (t) => {
  const { clock, endpoint, manager, log } = setup(t)
  // the first grant succeeds; every later one is refused with the form quoted back, raw and encoded
  let calls = 0
  endpoint.fallback = () => {
    calls += 1
    if (calls === 1) return { status: 200, body: JSON.stringify({ access_token: 'access-token-abcdef', token_type: 'Bearer', expires_in: 60, refresh_token: 'refresh-token-ghijkl', refresh_expires_in: 600 }) }
    const form = new URLSearchParams(endpoint.calls.at(-1)!.form).toString()
    const raw = Object.values(endpoint.calls.at(-1)!.form).join(' ')
    return keycloakError(400, calls === 2 ? 'invalid_grant' : 'invalid_request', `cannot use ${form} / ${raw}`)
  }
  manager.start()
  await clock.advance(0)
  t.ok(manager.ready())
  await clock.advance(50_000) // the refresh (refused, echoed), then password grants (refused, echoed)
  t.ok(endpoint.calls.length >= 3, `${endpoint.calls.length} grant requests`)
  const all = log.lines.join('\n')
  t.match(all, /invalid_grant/, 'the auth server\'s error code is logged as it came')
  t.match(all, /\[redacted\]/)
  for (const secret of [PASSWORD, encodeURIComponent(PASSWORD), CLIENT_SECRET, 'refresh-token-ghijkl', 'access-token-abcdef']) t.notMatch(all, secret, secret)
})

t.test('a refresh that fails for a transient reason keeps its refresh token: the next attempt refreshes again, no new session', async (t) => {
  const { clock, endpoint, manager } = setup(t, 0)
  endpoint.queue.push(tokenAnswer(300), new Error('connect ECONNREFUSED'), { status: 503, body: '' }, { status: 429, body: '' }, tokenAnswer(300))
  manager.start()
  await clock.advance(0)
  await clock.advance(150_000)
  await clock.advance(10_000)
  t.same(endpoint.grants(), ['password', 'refresh_token', 'refresh_token', 'refresh_token', 'refresh_token'], 'no password grant')
  const first = endpoint.calls[1]!.form.refresh_token
  t.same(endpoint.calls.slice(1).map((c) => c.form.refresh_token), [first, first, first, first], 'the same refresh token each time')
  t.equal(manager.ready(), true)
})

t.test('a refresh whose outcome is unknown (timed out after sending) is sent again; refused as invalid_grant, the password grant follows', async (t) => {
  const { clock, endpoint, manager } = setup(t, 0)
  endpoint.queue.push(tokenAnswer(300), 'hang', keycloakError(400, 'invalid_grant', 'Maximum allowed refresh token reuse exceeded'), tokenAnswer(300))
  manager.start()
  await clock.advance(0)
  await clock.advance(150_000)
  await clock.advance(10_000) // TOKEN_TIMEOUT_MS
  await clock.advance(2_000)
  t.same(endpoint.grants(), ['password', 'refresh_token', 'refresh_token', 'password'])
  t.equal(manager.ready(), true)
})

t.test('a refresh refused with anything but invalid_grant does not fall back to the password grant: the refresh is retried slowly', async (t) => {
  for (const answer of [keycloakError(401, 'invalid_client', 'Invalid client or Invalid client credentials'), keycloakError(400, 'invalid_scope', 'Invalid scopes'), { status: 400, body: '' }]) {
    const { clock, endpoint, manager } = setup(t, 0)
    endpoint.queue.push(tokenAnswer(300), answer, tokenAnswer(300))
    manager.start()
    await clock.advance(0)
    await clock.advance(150_000)
    await clock.advance(30_000)
    t.same(endpoint.grants(), ['password', 'refresh_token'], `${answer.body}: not retried at the outage pace`)
    await clock.advance(36_000)
    t.same(endpoint.grants(), ['password', 'refresh_token', 'refresh_token'], `${answer.body}: the refresh again, a minute later`)
    manager.stop()
  }
})

t.test('a 200 HTML page (a wrong token URL) is retried at the slow pace, not re-posting the password at the outage pace', async (t) => {
  const { clock, endpoint, manager } = setup(t, 0)
  endpoint.queue.push({ status: 200, headers: { 'content-type': 'text/html' }, body: '<html>sign in</html>' }, tokenAnswer(300))
  manager.start()
  await clock.advance(0)
  t.equal(manager.notReadyReason()?.startsWith('wrong token URL'), true)
  await clock.advance(50_000)
  t.equal(endpoint.calls.length, 1, 'no second password post within 50 s')
  await clock.advance(10_000)
  t.equal(endpoint.calls.length, 2)
})

t.test('a grant answered just after stop(): nothing is stored or scheduled, and its session is the one ended', async (t) => {
  const { clock, endpoint, manager } = setup(t)
  let answer: (res: AuthAnswer) => void = () => {}
  endpoint.queue.push({ later: new Promise((resolve) => { answer = resolve }) })
  manager.start()
  await settle()
  manager.stop()
  const late = tokenAnswer(300, 1800)
  answer(late)
  await settle()
  t.equal(manager.ready(), false, 'not stored')
  t.same(clock.pending, [], 'no renewal scheduled')
  const ended = await manager.endSession(5_000)
  t.equal(ended.outcome, 'success')
  t.equal(endpoint.calls.at(-1)!.form.refresh_token, (JSON.parse(late.body) as { refresh_token: string }).refresh_token, 'the late grant\'s session ended')
  await clock.advance(600_000)
  t.equal(endpoint.calls.length, 2, 'nothing else sent')
})

t.test('lifetimes use a monotonic clock: a wall clock stepped back does not make an expired token usable', async (t) => {
  const stepped = t.capture(Date, 'now', () => 0)
  const started = systemClock.now()
  await new Promise((resolve) => setTimeout(resolve, 50))
  t.ok(systemClock.now() - started >= 45, 'time goes on while Date.now() stands at 1970')
  t.ok(stepped.args().length === 0, 'the wall clock is not read')
})

t.test('private_key_jwt against a server that echoes the form: no assertion, signature or key reaches the log', async (t) => {
  const { generateKeyPairSync } = await import('node:crypto')
  const key = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }) as string
  const clock = new FakeClock()
  const endpoint = new ScriptedEndpoint()
  const log = captureLogger()
  const secrets = new SecretScrubber()
  const credentials = { read: async () => ({ username: 'svc', password: PASSWORD, clientKey: key }), onChange: () => {} }
  endpoint.fallback = () => {
    const form = endpoint.calls.at(-1)!.form
    return keycloakError(400, 'invalid_client', `cannot use ${new URLSearchParams(form).toString()} / ${Object.values(form).join(' ')}`)
  }
  const server = new OAuthClient({ tokenUrl: 'http://auth.invalid/token', grantType: 'password', clientId: 'legacy-app', client: new ClientAuthenticator({ clientId: 'legacy-app', clientAuth: 'private_key_jwt', onSecret: (v) => secrets.addToken(v) }), extras: {}, credentials, fetch: endpoint.fetch, timeoutMs: 10_000, clock, log: log.logger, secrets })
  const manager = new TokenLifecycle({ source: new OwnGrants({ server, credentials, clock, log: log.logger, secrets }), log: log.logger, waitMs: 5_000, retryMinMs: 1_000, retryMaxMs: 30_000, rejectedRetryMs: 60_000, clock, secrets })
  t.teardown(() => manager.stop())
  // signing is real asynchronous work: wait for each attempt's answer in real time
  const answered = async (n: number): Promise<void> => { await until(() => log.records().filter((r) => r.outcome === 'rejected').length === n) }
  manager.start()
  await answered(1)
  await clock.advance(70_000)
  await answered(2)
  t.equal(endpoint.calls.length, 2)
  const all = log.lines.join('\n')
  t.match(all, /invalid_client/, 'the server\'s error code is logged')
  for (const call of endpoint.calls) {
    const assertion = call.form.client_assertion!
    for (const part of assertion.split('.')) t.notOk(all.includes(part), 'no part of the assertion in the log')
  }
  t.notMatch(all, /PRIVATE KEY/)
  t.notOk(all.includes(PASSWORD))
})

// Last in this file: every test above has run and handed its log lines over.
t.test('no password, client secret or token in any log line of the tests above', async (t) => {
  t.ok(allLines.length > 50, `${allLines.length} lines searched`)
  t.same(allLines.filter((l) => l.includes(PASSWORD) || l.includes(CLIENT_SECRET) || /eyJhbGciOiJIUzI1NiJ9\.|refresh-\d/.test(l)), [])
})
