import t, { type Test } from 'tap'
import { SecretScrubber } from '../../src/secrets.js'
import { ClientAuthenticator } from '../../src/token/client-auth.js'
import { TokenExchange } from '../../src/token/exchange.js'
import { TokenLifecycle } from '../../src/token/lifecycle.js'
import { OAuthClient } from '../../src/token/oauth-client.js'
import { OwnGrants } from '../../src/token/own-grants.js'
import { FakeClock } from '../helpers/fake-clock.js'
import { captureLogger } from '../helpers/log.js'
import { keycloakError, ScriptedEndpoint, tokenAnswer, type AuthAnswer } from '../helpers/scripted-endpoint.js'

const EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange'
const PACE_MS = 60_000
/** the subject's tokens live an hour: it renews on its own only after half an hour */
const SUBJECT_SECONDS = 3_600

/** Keycloak's refusal of an exchange's subject token. */
const subjectRefused = (): AuthAnswer => keycloakError(400, 'invalid_grant', 'Invalid token')

/**
 * A subject credential (password grant) and a route's credential made by
 * exchanging its token, both on a fake clock against one scripted token
 * endpoint that answers the exchange with `exchangeAnswer`.
 */
function setup (t: Test) {
  const clock = new FakeClock()
  const endpoint = new ScriptedEndpoint()
  const log = captureLogger()
  const secrets = new SecretScrubber()
  const credentials = { read: async () => ({ username: 'svc', password: 'p4ssw0rd-value', clientSecret: 'client-s3cret-value' }), onChange: () => {} }
  const server = (): OAuthClient => new OAuthClient({
    tokenUrl: 'http://auth.invalid/token',
    grantType: 'password',
    clientId: 'legacy-app',
    client: new ClientAuthenticator({ clientId: 'legacy-app', clientAuth: 'client_secret_post', onSecret: (v) => secrets.addToken(v) }),
    extras: {},
    credentials,
    fetch: endpoint.fetch,
    timeoutMs: 10_000,
    clock,
    log: log.logger,
    secrets
  })
  const lifecycle = (source: ConstructorParameters<typeof TokenLifecycle>[0]['source']): TokenLifecycle => new TokenLifecycle({
    source,
    log: log.logger,
    waitMs: 5_000,
    retryMinMs: 1_000,
    retryMaxMs: 30_000,
    rejectedRetryMs: PACE_MS,
    clock,
    random: () => 0.5,
    secrets
  })
  const subjectServer = server()
  const subject = lifecycle(new OwnGrants({ server: subjectServer, credentials, clock, log: log.logger, secrets }))
  const exchanged = lifecycle(new TokenExchange({ server: server(), subject, audience: 'reports-api', log: log.logger, secrets }))
  const state = { exchangeAnswer: subjectRefused }
  endpoint.fallback = () => endpoint.calls.at(-1)!.form.grant_type === EXCHANGE ? state.exchangeAnswer() : tokenAnswer(SUBJECT_SECONDS)
  t.teardown(() => {
    exchanged.stop()
    subject.stop()
  })
  const subjectToken = (): string => subject.current()!.header.slice('Bearer '.length)
  return {
    clock,
    endpoint,
    subject,
    exchanged,
    state,
    subjectToken,
    /** the subject's grants the endpoint saw */
    subjectGrants: () => endpoint.grants().filter((g) => g !== EXCHANGE),
    /** the exchanges the endpoint saw: when, and which subject token */
    exchanges: () => endpoint.calls.flatMap((c, i) => c.form.grant_type === EXCHANGE ? [{ i, subject: c.form.subject_token! }] : []),
    async start (): Promise<void> {
      subject.start()
      await clock.advance(0)
      exchanged.start()
      await clock.advance(0)
    }
  }
}

t.test('an exchange refused with invalid_grant every time: the subject is renewed once, then the exchange of its new token is paced, never a subject renewal per retry', async (t) => {
  const { clock, subject, exchanged, state, subjectToken, subjectGrants, exchanges, start } = setup(t)
  await start()
  const first = exchanges()
  t.equal(first.length, 2, 'the first subject token, refused; then its renewed one, refused again')
  t.same(subjectGrants(), ['password', 'refresh_token'], 'the subject renewed once, for the refusal')
  const renewed = subjectToken()
  t.not(first[0]!.subject, renewed, 'the first exchange sent the token the subject held then')
  t.equal(first[1]!.subject, renewed, 'the second its renewed one')

  // ten minutes of retries: at the slow pace, each with the renewed token, and the subject left alone
  const sentAt: number[] = []
  const seen = exchanges().length
  for (let elapsed = 0; elapsed < 10 * PACE_MS; elapsed += 1_000) {
    await clock.advance(1_000)
    if (exchanges().length > seen + sentAt.length) sentAt.push(elapsed + 1_000)
  }
  const paced = exchanges().slice(seen)
  t.ok(paced.length >= 8 && paced.length <= 11, `paced about once a minute (${paced.length} exchanges in 10 minutes)`)
  const gaps = sentAt.slice(1).map((at, i) => at - sentAt[i]!)
  t.ok(gaps.every((gap) => gap >= 0.9 * PACE_MS - 1_000), `never sooner than the pace (${gaps.join(', ')} ms apart)`)
  t.same(subjectGrants(), ['password', 'refresh_token'], 'still one subject renewal: none per retry')
  t.ok(paced.every((e) => e.subject === renewed), 'each retry exchanges the renewed subject token')
  t.notOk(exchanges().slice(1).some((e) => e.subject === first[0]!.subject), 'the first refused subject token is never sent again')
  t.equal(exchanged.ready(), false, 'the route holds no token meanwhile')
  t.equal(subject.current()?.header, `Bearer ${renewed}`, 'the subject keeps its token for everything else')

  // the exchange is allowed again: the next paced retry succeeds
  state.exchangeAnswer = () => tokenAnswer(300, undefined, false)
  await clock.advance(PACE_MS * 1.1)
  t.equal(exchanged.ready(), true, 'the route holds its token again')
  t.same(subjectGrants(), ['password', 'refresh_token'], 'with the subject token renewed once')
})

t.test('after an exchange worked, a new refusal of the subject renews it once more (and once only)', async (t) => {
  const { clock, exchanged, state, subjectToken, subjectGrants, exchanges, start } = setup(t)
  state.exchangeAnswer = () => tokenAnswer(300, undefined, false)
  await start()
  t.equal(exchanged.ready(), true, 'exchanged at start')
  t.same(subjectGrants(), ['password'])

  // the subject's session ends: every exchange is refused from the renewal of the exchanged token on
  state.exchangeAnswer = subjectRefused
  const before = exchanges().length
  await clock.advance(300_000 * 0.75)
  const refused = exchanges().slice(before)
  t.equal(refused.length, 2, 'the renewal\'s exchange refused, then the renewed subject\'s')
  t.same(subjectGrants(), ['password', 'refresh_token'], 'one subject renewal')
  t.equal(refused[1]!.subject, subjectToken(), 'the renewed subject token sent')
  await clock.advance(5 * PACE_MS)
  t.same(subjectGrants(), ['password', 'refresh_token'], 'none per paced retry')
  t.ok(exchanges().length - before >= 6, 'the exchange retried at the pace')
})

t.test('the subject renewed on its own schedule while the exchange is paced: its new token is exchanged at once, renewed once if refused, then paced', async (t) => {
  const { clock, endpoint, subjectGrants, start } = setup(t)
  await start()
  t.same(subjectGrants(), ['password', 'refresh_token'])
  // the subject renews by itself at 50-75% of its hour (a password grant: its refresh token lapses first)
  while (subjectGrants().length === 2) await clock.advance(1_000)
  const own = endpoint.calls.map((c, i) => c.form.grant_type === EXCHANGE ? -1 : i).filter((i) => i >= 0)[2]!
  const since = (): Array<{ grant: string, subject?: string }> => endpoint.calls.slice(own).map((c) => ({ grant: c.form.grant_type!, ...(c.form.subject_token !== undefined && { subject: c.form.subject_token }) }))
  const ownRenewal = since()
  t.same(ownRenewal, [
    { grant: 'password' },
    { grant: EXCHANGE, subject: issued(endpoint, own) },
    { grant: 'refresh_token' },
    { grant: EXCHANGE, subject: issued(endpoint, own + 2) }
  ], 'its own new token exchanged at once and refused: renewed once, the renewed one refused too')
  await clock.advance(5 * PACE_MS)
  const later = since().slice(ownRenewal.length)
  t.ok(later.length >= 4 && later.length <= 6, `then paced (${later.length} exchanges in 5 minutes)`)
  t.ok(later.every((c) => c.grant === EXCHANGE && c.subject === issued(endpoint, own + 2)), 'only exchanges of that renewed token: no subject renewal per retry')
})

/** The access token the endpoint's answer to call `i` issued. */
function issued (endpoint: ScriptedEndpoint, i: number): string | undefined {
  const answer = endpoint.answers[i] as AuthAnswer | undefined
  return answer?.status === 200 ? (JSON.parse(answer.body) as { access_token: string }).access_token : undefined
}
