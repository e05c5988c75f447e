import t, { type Test } from 'tap'
import { SecretScrubber } from '../../src/secrets.js'
import { ClientAuthenticator } from '../../src/token/client-auth.js'
import { TokenLifecycle } from '../../src/token/lifecycle.js'
import { OwnGrants } from '../../src/token/own-grants.js'
import { OAuthClient } from '../../src/token/oauth-client.js'
import { FakeClock, settle } from '../helpers/fake-clock.js'
import { captureLogger } from '../helpers/log.js'
import { keycloakError, ScriptedEndpoint, tokenAnswer, type AuthAnswer } from '../helpers/scripted-endpoint.js'

const TOKEN_URL = 'https://sso.invalid/realms/r/protocol/openid-connect/token'
const LOGOUT_URL = 'https://sso.invalid/realms/r/protocol/openid-connect/logout'
const REVOKE_URL = 'https://sso.invalid/realms/r/protocol/openid-connect/revoke'
const BOUND_REFRESH_REFUSED = (): AuthAnswer => keycloakError(400, 'invalid_grant', 'DPoP proof is missing')

/** A token manager holding a session, its token endpoint scripted, on a fake clock. */
async function holding (t: Test, tokenUrl = TOKEN_URL): Promise<{ clock: FakeClock, endpoint: ScriptedEndpoint, manager: TokenLifecycle, log: ReturnType<typeof captureLogger> }> {
  const clock = new FakeClock()
  const endpoint = new ScriptedEndpoint()
  const log = captureLogger()
  const credentials = { read: async () => ({ username: 'svc', password: 'pw' }), onChange: () => {} }
  const server = new OAuthClient({
    tokenUrl,
    grantType: 'password',
    clientId: 'public-app',
    client: new ClientAuthenticator({ clientId: 'public-app', clientAuth: 'client_secret_post', onSecret: () => {} }),
    extras: {},
    credentials,
    fetch: endpoint.fetch,
    timeoutMs: 10_000,
    clock,
    log: log.logger,
    secrets: new SecretScrubber()
  })
  const manager = new TokenLifecycle({ source: new OwnGrants({ server, credentials, clock, log: log.logger, secrets: new SecretScrubber() }), log: log.logger, waitMs: 5_000, retryMinMs: 1_000, retryMaxMs: 30_000, rejectedRetryMs: 60_000, clock, secrets: new SecretScrubber() })
  t.teardown(() => manager.stop())
  endpoint.queue.push(tokenAnswer(300, 1800))
  manager.start()
  await clock.advance(0)
  t.equal(manager.ready(), true, 'a session is held')
  return { clock, endpoint, manager, log }
}

t.test('an end-session endpoint that refuses: the refresh token is revoked at Keycloak\'s revocation endpoint instead', async (t) => {
  const { endpoint, manager, log } = await holding(t)
  endpoint.queue.push(BOUND_REFRESH_REFUSED(), { status: 200, body: '' })
  const ended = await manager.endSession(5_000)
  const [, logout, revoke] = endpoint.calls
  t.equal(logout!.url, LOGOUT_URL)
  t.equal(revoke!.url, REVOKE_URL)
  t.same(revoke!.form, { token: logout!.form.refresh_token, token_type_hint: 'refresh_token', client_id: 'public-app' }, 'the same refresh token, revoked')
  t.equal(ended.outcome, 'success')
  t.equal(ended.detail, `session ended: the revocation endpoint ${REVOKE_URL} answered 200, after the end-session endpoint ${LOGOUT_URL} answered 400 invalid_grant (DPoP proof is missing)`)
  t.match(log.records().find((r) => r.event === 'logout'), { outcome: 'success', msg: ended.detail })
  t.equal(endpoint.calls.length, 3, 'nothing else sent')
})

t.test('both refuse: not ended, and both answers said', async (t) => {
  const { endpoint, manager } = await holding(t)
  endpoint.queue.push(BOUND_REFRESH_REFUSED(), keycloakError(401, 'unauthorized_client', 'Invalid client or Invalid client credentials'))
  const ended = await manager.endSession(5_000)
  t.equal(ended.outcome, 'rejected')
  t.equal(ended.detail, `session not ended: the end-session endpoint ${LOGOUT_URL} answered 400 invalid_grant (DPoP proof is missing); the revocation endpoint ${REVOKE_URL} answered 401 unauthorized_client (Invalid client or Invalid client credentials)`)
})

t.test('an end-session endpoint that accepts: no revocation request', async (t) => {
  const { endpoint, manager } = await holding(t)
  endpoint.queue.push({ status: 204, body: '' })
  t.equal((await manager.endSession(5_000)).outcome, 'success')
  t.same(endpoint.calls.slice(1).map((c) => c.url), [LOGOUT_URL])
})

t.test('an unreachable auth server: one request, no revocation after it', async (t) => {
  const { endpoint, manager } = await holding(t)
  endpoint.queue.push(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }))
  const ended = await manager.endSession(5_000)
  t.equal(ended.outcome, 'error')
  t.equal(ended.detail, 'session not ended: logout request failed: ECONNREFUSED')
  t.same(endpoint.calls.slice(1).map((c) => c.url), [LOGOUT_URL])
})

t.test('the revocation request gets only what is left of the timeout', async (t) => {
  const { clock, endpoint, manager } = await holding(t)
  let refuse: (res: AuthAnswer) => void = () => {}
  endpoint.queue.push({ later: new Promise((resolve) => { refuse = resolve }) }, 'hang')
  const ending = manager.endSession(300)
  await clock.advance(250)
  refuse(BOUND_REFRESH_REFUSED())
  await settle()
  t.same(endpoint.calls.slice(1).map((c) => c.url), [LOGOUT_URL, REVOKE_URL], 'the refusal came at 250 ms of 300; revocation follows')
  t.equal(clock.pending[0], 50, 'the revocation request is aborted at 300 ms, not 550')
  await clock.advance(50)
  const ended = await ending
  t.equal(ended.outcome, 'error')
  t.equal(ended.detail, `session not ended: the end-session endpoint ${LOGOUT_URL} answered 400 invalid_grant (DPoP proof is missing); logout request timed out after 50 ms`)
})

t.test('a refusal that took the whole timeout: no revocation request, and the log says why', async (t) => {
  const { clock, endpoint, manager } = await holding(t)
  let refuse: (res: AuthAnswer) => void = () => {}
  endpoint.queue.push({ later: new Promise((resolve) => { refuse = resolve }) })
  const ending = manager.endSession(300)
  await clock.advance(300)
  refuse(BOUND_REFRESH_REFUSED())
  const ended = await ending
  t.equal(ended.detail, `session not ended: the end-session endpoint ${LOGOUT_URL} answered 400 invalid_grant (DPoP proof is missing); no time left for the revocation endpoint ${REVOKE_URL}`)
  t.same(endpoint.calls.slice(1).map((c) => c.url), [LOGOUT_URL])
})

t.test('a token URL outside Keycloak\'s layout: no end-session endpoint to try, and no guessed revocation', async (t) => {
  const { endpoint, manager } = await holding(t, 'https://auth.invalid/oauth2/v1/tokens')
  const ended = await manager.endSession(5_000)
  t.equal(ended.outcome, 'skipped')
  t.equal(endpoint.calls.length, 1, 'only the grant')
})

t.test('a revocation endpoint answering 400 unsupported_token_type (RFC 7009 2.2.1): nothing to end, not an error', async (t) => {
  const clock = new FakeClock()
  const endpoint = new ScriptedEndpoint()
  const log = captureLogger()
  const issuer = 'https://as.invalid'
  const credentials = { read: async () => ({ clientSecret: 's3cret' }), onChange: () => {} }
  const server = new OAuthClient({
    issuerUrl: issuer,
    discoveryUrl: `${issuer}/.well-known/openid-configuration`,
    grantType: 'client_credentials',
    clientId: 'svc',
    client: new ClientAuthenticator({ clientId: 'svc', clientAuth: 'client_secret_post', onSecret: () => {} }),
    extras: {},
    credentials,
    fetch: endpoint.fetch,
    timeoutMs: 10_000,
    clock,
    log: log.logger,
    secrets: new SecretScrubber()
  })
  const manager = new TokenLifecycle({ source: new OwnGrants({ server, credentials, clock, log: log.logger, secrets: new SecretScrubber() }), log: log.logger, waitMs: 5_000, retryMinMs: 1_000, retryMaxMs: 30_000, rejectedRetryMs: 60_000, clock, secrets: new SecretScrubber() })
  t.teardown(() => manager.stop())
  endpoint.queue.push({ status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ issuer, token_endpoint: `${issuer}/token`, revocation_endpoint: `${issuer}/revoke` }) }, tokenAnswer(300, undefined, false))
  manager.start()
  await clock.advance(0)
  t.equal(manager.ready(), true)
  endpoint.queue.push(keycloakError(400, 'unsupported_token_type', 'only refresh tokens can be revoked'))
  manager.stop()
  const ended = await manager.endSession(5_000)
  t.same(endpoint.calls.slice(2).map((c) => [c.url, c.form.token_type_hint]), [[`${issuer}/revoke`, 'access_token']], 'the access token was offered for revocation')
  t.same(ended, { outcome: 'skipped', detail: `nothing to end: the revocation endpoint ${issuer}/revoke answered 400 unsupported_token_type (it does not revoke access tokens)` })
  t.match(log.records().find((r) => r.event === 'logout'), { level: 30, outcome: 'skipped' }, 'logged at info, not as a failure')
})
