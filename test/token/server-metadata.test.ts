import { decodeProtectedHeader } from 'jose'
import t from 'tap'
import type { ClientAuth } from '../../src/config/types.js'
import { loadConfig } from '../../src/config/load.js'
import { SecretScrubber } from '../../src/secrets.js'
import { ClientAuthenticator } from '../../src/token/client-auth.js'
import { systemClock } from '../../src/token/clock.js'
import { DpopKey } from '../../src/token/dpop.js'
import { GrantError } from '../../src/token/grant.js'
import { OAuthClient } from '../../src/token/oauth-client.js'
import { NO_GRANT_SPAN } from '../../src/tracing/tracing.js'
import { captureLogger } from '../helpers/log.js'
import { ScriptedEndpoint, tokenAnswer, type AuthAnswer } from '../helpers/scripted-endpoint.js'

/** A metadata document naming `issuer`, its endpoints under `base` (the issuer's own by default). */
function metadata (issuer: string, extra: object = {}, base = issuer.replace(/\/+$/, '')): AuthAnswer {
  return { status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ issuer, token_endpoint: `${base}/token`, revocation_endpoint: `${base}/revoke`, ...extra }) }
}

const NOT_FOUND: AuthAnswer = { status: 404, headers: { 'content-type': 'application/json' }, body: '{"error":"not_found"}' }

interface Options { issuerUrl: string, discoveryUrl?: string, clientAuth?: ClientAuth, dpop?: DpopKey, dpopAlgSet?: boolean }

/** An OAuth client that discovers `issuerUrl` through a scripted endpoint; what it fetched and logged. */
function discovering (options: Options) {
  const endpoint = new ScriptedEndpoint()
  const log = captureLogger()
  const server = new OAuthClient({
    issuerUrl: options.issuerUrl,
    ...(options.discoveryUrl !== undefined && { discoveryUrl: options.discoveryUrl }),
    grantType: 'client_credentials',
    clientId: 'svc',
    client: new ClientAuthenticator({ clientId: 'svc', clientAuth: options.clientAuth ?? 'client_secret_post', onSecret: () => {} }),
    extras: {},
    credentials: { read: async () => ({ clientSecret: 's3cret' }) },
    fetch: endpoint.fetch,
    timeoutMs: 1_000,
    ...(options.dpop !== undefined && { dpop: options.dpop, dpopAlgSet: options.dpopAlgSet === true }),
    clock: systemClock,
    log: log.logger,
    secrets: new SecretScrubber()
  })
  return { endpoint, server, log, urls: () => endpoint.calls.map((c) => c.url) }
}

/** The discovery URL the configuration derives, as the sidecar would use it. */
function configured (env: Record<string, string>): { issuerUrl: string, discoveryUrl: string } {
  const auth = loadConfig({ BASE_URL: 'http://127.0.0.1:1', AUTH_CLIENT_ID: 'svc', AUTH_CLIENT_SECRET: 's', AUTH_GRANT_TYPE: 'client_credentials', ...env }, { cwd: '/nonexistent' }).routes[0]!.credential.auth
  if (auth.mode !== 'oauth2' || auth.issuerUrl === undefined || auth.discoveryUrl === undefined) throw new Error('no discovery configured')
  return { issuerUrl: auth.issuerUrl, discoveryUrl: auth.discoveryUrl }
}

t.test('discovery: the OpenID Connect document first; on 404, the RFC 8414 metadata with the issuer\'s path after the well-known part', async (t) => {
  const issuer = 'https://as.example/tenant-1'
  const d = discovering(configured({ AUTH_ISSUER_URL: issuer }))
  d.endpoint.queue.push(NOT_FOUND, metadata(issuer), tokenAnswer())
  const endpoints = await d.server.discover()
  t.same(d.urls(), ['https://as.example/tenant-1/.well-known/openid-configuration', 'https://as.example/.well-known/oauth-authorization-server/tenant-1'])
  t.match(endpoints, { issuer, url: 'https://as.example/.well-known/oauth-authorization-server/tenant-1', tokenUrl: `${issuer}/token`, revocationUrl: `${issuer}/revoke` })
  await d.server.primaryGrant(NO_GRANT_SPAN)
  t.equal(d.urls()[2], `${issuer}/token`, 'the grant goes to the token endpoint the metadata names')
  t.match(d.log.records().find((r) => r.msg === 'discovered the realm\'s endpoints'), { issuer, discoveryUrl: 'https://as.example/.well-known/oauth-authorization-server/tenant-1' })
})

t.test('discovery: an OpenID Connect document that is there is the only one fetched; a failure other than 404 is not followed by RFC 8414\'s', async (t) => {
  const issuer = 'https://as.example/tenant-1'
  const found = discovering(configured({ AUTH_ISSUER_URL: issuer }))
  found.endpoint.queue.push(metadata(issuer))
  await found.server.discover()
  t.same(found.urls(), [`${issuer}/.well-known/openid-configuration`])

  const failing = discovering(configured({ AUTH_ISSUER_URL: issuer }))
  failing.endpoint.queue.push({ status: 503, body: '' })
  const err = await failing.server.discover().catch((e: unknown) => e as GrantError)
  t.match(err, { kind: 'transient' })
  t.same(failing.urls(), [`${issuer}/.well-known/openid-configuration`])
})

t.test('discovery: neither document there names both URLs tried', async (t) => {
  const d = discovering(configured({ AUTH_ISSUER_URL: 'https://as.example/tenant-1' }))
  d.endpoint.queue.push(NOT_FOUND, NOT_FOUND)
  const err = await d.server.discover().catch((e: unknown) => e as GrantError)
  t.match(err, {
    kind: 'wrong_url',
    message: 'discovery: https://as.example/tenant-1/.well-known/openid-configuration answered 404, then https://as.example/.well-known/oauth-authorization-server/tenant-1 answered 404: AUTH_ISSUER_URL is not an OpenID Connect issuer nor an RFC 8414 authorization server (Keycloak\'s is https://host/realms/<realm>)'
  })
  t.equal(d.endpoint.calls.length, 2, 'two documents, no more')
})

t.test('discovery: an issuer that is a bare origin, with or without its slash, as the server names it', async (t) => {
  for (const issuer of ['https://as.example', 'https://as.example/']) {
    const d = discovering(configured({ AUTH_ISSUER_URL: issuer }))
    t.equal(d.server.issuerUrl, issuer, 'kept as written')
    d.endpoint.queue.push(NOT_FOUND, metadata(issuer))
    const endpoints = await d.server.discover()
    t.same(d.urls(), ['https://as.example/.well-known/openid-configuration', 'https://as.example/.well-known/oauth-authorization-server'], issuer)
    t.match(endpoints, { issuer, tokenUrl: 'https://as.example/token' })
  }
})

t.test('issuers compare exactly: a trailing slash the document adds or drops is another issuer, a bare origin\'s too, refused with both values', async (t) => {
  const pairs = [['https://as.example/tenant-1', 'https://as.example/tenant-1/'], ['https://as.example/tenant-1/', 'https://as.example/tenant-1'], ['https://as.example', 'https://as.example/'], ['https://as.example/', 'https://as.example']]
  for (const [given, named] of pairs) {
    const d = discovering(configured({ AUTH_ISSUER_URL: given! }))
    d.endpoint.queue.push(metadata(named!))
    const err = await d.server.discover().then(() => undefined, (e: unknown) => e as GrantError)
    t.ok(err instanceof GrantError)
    t.match(err?.message, `names the issuer "${named!}", not ${given!} (they differ in a trailing slash, and issuers compare exactly)`)
    t.equal(d.server.endpoints, undefined, 'nothing of the document is used')
  }
})

t.test('AUTH_DISCOVERY_URL may name the RFC 8414 document in full: fetched as it is, its endpoints reached at that address', async (t) => {
  const issuer = 'https://sso.example.com/tenant-1'
  const internal = 'http://as.internal:8080/.well-known/oauth-authorization-server/tenant-1'
  const c = configured({ AUTH_ISSUER_URL: issuer, AUTH_DISCOVERY_URL: internal })
  t.equal(c.discoveryUrl, internal, 'the configuration keeps the URL as given')
  const d = discovering(c)
  d.endpoint.queue.push(metadata(issuer))
  const endpoints = await d.server.discover()
  t.same(d.urls(), [internal])
  t.match(endpoints, { issuer, tokenUrl: 'http://as.internal:8080/tenant-1/token', revocationUrl: 'http://as.internal:8080/tenant-1/revoke' })

  t.equal(configured({ AUTH_ISSUER_URL: issuer, AUTH_DISCOVERY_URL: 'http://as.internal:8080/tenant-1/.well-known/openid-configuration' }).discoveryUrl, 'http://as.internal:8080/tenant-1/.well-known/openid-configuration', 'and the OpenID Connect one')
})

t.test('dpop_signing_alg_values_supported: AUTH_DPOP_ALG set to an algorithm not offered is a configuration error naming it and what is offered', async (t) => {
  const issuer = 'https://as.example'
  const d = discovering({ ...configured({ AUTH_ISSUER_URL: issuer }), dpop: await DpopKey.generate('PS256'), dpopAlgSet: true })
  d.endpoint.queue.push(metadata(issuer, { dpop_signing_alg_values_supported: ['ES256', 'EdDSA'] }))
  const err = await d.server.discover().catch((e: unknown) => e as GrantError)
  t.match(err, { kind: 'rejected', message: 'discovery: AUTH_DPOP_ALG=PS256 is not among the DPoP algorithms the auth server offers (dpop_signing_alg_values_supported: ES256, EdDSA): set AUTH_DPOP_ALG to one of them, or unset it' })
  t.equal(d.server.endpoints, undefined)
  t.equal(d.endpoint.calls.length, 1, 'no grant is sent')
})

t.test('dpop_signing_alg_values_supported: with AUTH_DPOP_ALG unset, a key of an algorithm offered proves the token requests', async (t) => {
  const issuer = 'https://as.example'
  const initial = await DpopKey.generate('ES256')
  const d = discovering({ ...configured({ AUTH_ISSUER_URL: issuer }), dpop: initial })
  d.endpoint.queue.push(metadata(issuer, { dpop_signing_alg_values_supported: ['RS256', 'EdDSA'] }), { ...tokenAnswer(), body: JSON.stringify({ access_token: 'bound-token', token_type: 'DPoP', expires_in: 300 }) })
  await d.server.discover()
  t.equal(d.server.dpop!.alg, 'EdDSA', 'the first the sidecar prefers among those offered')
  t.not(d.server.dpop!.thumbprint, initial.thumbprint, 'a new key')
  await d.server.primaryGrant(NO_GRANT_SPAN)
  t.equal(decodeProtectedHeader(d.endpoint.calls[1]!.headers.dpop!).alg, 'EdDSA', 'the token request\'s proof is signed with it')
  t.match(d.log.records().find((r) => r.dpopAlg === 'EdDSA')?.msg, /does not offer ES256 for DPoP proofs: using a new EdDSA key/)

  const kept = discovering({ ...configured({ AUTH_ISSUER_URL: issuer }), dpop: initial })
  kept.endpoint.queue.push(metadata(issuer, { dpop_signing_alg_values_supported: ['EdDSA', 'ES256'] }))
  await kept.server.discover()
  t.equal(kept.server.dpop, initial, 'ES256 offered: the key made at start is kept')

  const none = discovering({ ...configured({ AUTH_ISSUER_URL: issuer }), dpop: initial })
  none.endpoint.queue.push(metadata(issuer, { dpop_signing_alg_values_supported: ['ES512'] }))
  t.match(await none.server.discover().catch((e: unknown) => e as GrantError), { kind: 'rejected', message: /offers DPoP with ES512 only \(dpop_signing_alg_values_supported\), none of which AUTH_DPOP_ALG can be/ })
})

t.test('token_endpoint_auth_methods_supported: a client authentication method the server does not list is warned about, naming AUTH_CLIENT_AUTH', async (t) => {
  const issuer = 'https://as.example'
  const d = discovering({ ...configured({ AUTH_ISSUER_URL: issuer }), clientAuth: 'client_secret_post' })
  d.endpoint.queue.push(metadata(issuer, { token_endpoint_auth_methods_supported: ['client_secret_basic', 'private_key_jwt'] }), tokenAnswer())
  const endpoints = await d.server.discover()
  const warning = 'AUTH_CLIENT_AUTH=client_secret_post is not among the client authentication methods the auth server lists (token_endpoint_auth_methods_supported: client_secret_basic, private_key_jwt): the token endpoint may refuse the client'
  t.same(endpoints!.ignored, [warning])
  t.ok(d.log.records().some((r) => r.level === 40 && r.msg === warning), 'warned in the log')
  await d.server.primaryGrant(NO_GRANT_SPAN)
  t.equal(d.endpoint.calls.length, 2, 'the grant is still tried')

  const listed = discovering({ ...configured({ AUTH_ISSUER_URL: issuer }), clientAuth: 'client_secret_basic' })
  listed.endpoint.queue.push(metadata(issuer, { token_endpoint_auth_methods_supported: ['client_secret_basic'] }))
  t.same((await listed.server.discover())!.ignored, [], 'a method listed: no warning')
})

t.test('a document AUTH_DISCOVERY_URL names is the only one fetched: its 404 is not followed by another', async (t) => {
  const d = discovering(configured({ AUTH_ISSUER_URL: 'https://sso.example.com/tenant-1', AUTH_DISCOVERY_URL: 'http://as.internal:8080/tenant-1/.well-known/openid-configuration' }))
  d.endpoint.queue.push(NOT_FOUND)
  const err = await d.server.discover().catch((e: unknown) => e as GrantError)
  t.same(d.urls(), ['http://as.internal:8080/tenant-1/.well-known/openid-configuration'])
  t.match(err, { kind: 'wrong_url', message: /^discovery: http:\/\/as\.internal:8080\/tenant-1\/\.well-known\/openid-configuration answered 404: AUTH_DISCOVERY_URL is not an OpenID Connect issuer/ })
})
