import t from 'tap'
import type { ClientAuth, PrimaryGrant } from '../../src/config/types.js'
import { SecretScrubber } from '../../src/secrets.js'
import { ClientAuthenticator } from '../../src/token/client-auth.js'
import { GrantError } from '../../src/token/grant.js'
import { TokenLifecycle } from '../../src/token/lifecycle.js'
import { OAuthClient } from '../../src/token/oauth-client.js'
import { OwnGrants } from '../../src/token/own-grants.js'
import { NO_GRANT_SPAN } from '../../src/tracing/tracing.js'
import { FakeClock } from '../helpers/fake-clock.js'
import { captureLogger } from '../helpers/log.js'
import { keycloakError, ScriptedEndpoint } from '../helpers/scripted-endpoint.js'

const TOKEN_URL = 'https://as.example/oauth2/token'

interface Options { grantType?: PrimaryGrant, clientAuth?: ClientAuth, scope?: string }

function refusing (options: Options = {}) {
  const endpoint = new ScriptedEndpoint()
  const clock = new FakeClock()
  const log = captureLogger()
  const clientAuth = options.clientAuth ?? 'client_secret_post'
  const credentials = { read: async () => ({ username: 'svc', password: 'pw', clientSecret: 's3cret' }), onChange: () => {} }
  const server = new OAuthClient({
    tokenUrl: TOKEN_URL,
    grantType: options.grantType ?? 'client_credentials',
    clientId: 'svc',
    client: new ClientAuthenticator({ clientId: 'svc', clientAuth, onSecret: () => {} }),
    extras: { ...(options.scope !== undefined && { scope: options.scope }) },
    credentials,
    fetch: endpoint.fetch,
    timeoutMs: 1_000,
    clock,
    log: log.logger,
    secrets: new SecretScrubber()
  })
  const refusal = async (answer: ReturnType<typeof keycloakError>): Promise<GrantError> => {
    endpoint.queue.push(answer)
    return await server.primaryGrant(NO_GRANT_SPAN).then(() => { throw new Error('granted') }, (e: unknown) => e as GrantError)
  }
  return { endpoint, server, clock, log, credentials, refusal }
}

t.test('unsupported_grant_type names AUTH_GRANT_TYPE, and client_credentials as what most servers offer', async (t) => {
  const err = await refusing({ grantType: 'password' }).refusal(keycloakError(400, 'unsupported_grant_type', 'unsupported grant_type requested'))
  t.equal(err.message, 'token endpoint answered 400 unsupported_grant_type (unsupported grant_type requested): the server does not offer the password grant; set AUTH_GRANT_TYPE to one it does (client_credentials is the one most servers offer a service)')
  t.equal(err.kind, 'rejected')
})

t.test('invalid_client names the client authentication settings of the method in use', async (t) => {
  const cases: Array<[ClientAuth, string]> = [
    ['client_secret_post', '. Check AUTH_CLIENT_ID and AUTH_CLIENT_SECRET, and AUTH_CLIENT_AUTH (client_secret_post: one of the methods the client is registered with)'],
    ['client_secret_basic', '. Check AUTH_CLIENT_ID and AUTH_CLIENT_SECRET, and whether the server takes client_secret_basic (AUTH_CLIENT_AUTH)'],
    ['client_secret_jwt', '. Check AUTH_CLIENT_ID and AUTH_CLIENT_SECRET, and AUTH_CLIENT_AUTH (client_secret_jwt: one of the methods the client is registered with)']
  ]
  for (const [clientAuth, advice] of cases) {
    const err = await refusing({ clientAuth }).refusal(keycloakError(401, 'invalid_client', 'client authentication failed'))
    t.equal(err.message, `token endpoint answered 401 invalid_client (client authentication failed)${advice}`, clientAuth)
    t.equal(err.oauthError, 'invalid_client', 'the error code is kept for what sorts refusals')
  }
  const rfc = await refusing().refusal(keycloakError(400, 'unauthorized_client', 'the client is not allowed this grant'))
  t.match(rfc.message, /\. Check AUTH_CLIENT_ID and AUTH_CLIENT_SECRET, .*; or the client may not use the client_credentials grant \(AUTH_GRANT_TYPE\)$/, 'unauthorized_client: the credentials, or the grant (RFC 6749)')
  const keycloak = await refusing({ grantType: 'password' }).refusal(keycloakError(400, 'unauthorized_client', 'Client not allowed for direct access grants'))
  t.equal(keycloak.message, 'token endpoint answered 400 unauthorized_client (Client not allowed for direct access grants): turn on "Direct access grants" for this client in Keycloak (a configuration error)', 'Keycloak\'s own hint is kept alone')
})

t.test('invalid_scope names AUTH_SCOPE, with its value or saying it is unset', async (t) => {
  const set = await refusing({ scope: 'orders:write' }).refusal(keycloakError(400, 'invalid_scope', 'requested scope is not allowed'))
  t.equal(set.message, 'token endpoint answered 400 invalid_scope (requested scope is not allowed). Check AUTH_SCOPE ("orders:write"): the server refuses it, or a part of it, for this client')
  const unset = await refusing().refusal(keycloakError(400, 'invalid_scope', 'scope is required'))
  t.equal(unset.message, 'token endpoint answered 400 invalid_scope (scope is required). Check AUTH_SCOPE: it is unset, and the server may require one')
})

t.test('the advice is in the log line of the refused grant, as check says it', async (t) => {
  const r = refusing({ scope: 'orders:write' })
  r.endpoint.fallback = () => keycloakError(400, 'invalid_scope', 'requested scope is not allowed')
  const manager = new TokenLifecycle({ source: new OwnGrants({ server: r.server, credentials: r.credentials, clock: r.clock, log: r.log.logger, secrets: new SecretScrubber() }), log: r.log.logger, waitMs: 5_000, retryMinMs: 1_000, retryMaxMs: 30_000, rejectedRetryMs: 60_000, clock: r.clock, secrets: new SecretScrubber() })
  t.teardown(() => manager.stop())
  manager.start()
  await r.clock.advance(0)
  const line = r.log.records().find((l) => l.event === 'token' && l.outcome === 'rejected')
  t.match(line, { level: 50, reason: /invalid_scope \(requested scope is not allowed\)\. Check AUTH_SCOPE \("orders:write"\)/ })
})
