import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { calculateJwkThumbprint, decodeProtectedHeader, type JWK } from 'jose'
import t, { type Test } from 'tap'
import WebSocket from 'ws'
import type { TokenServerOptions } from '../../dev/token-server.js'
import { build, metric, until, type Harness } from '../helpers/build.js'
import { dpopApi } from '../helpers/dpop-api.js'
import type { TokenLifecycle } from '../../src/token/lifecycle.js'

/** A sidecar in DPoP mode in front of a strict DPoP API at `<api>/v1`, against a token server that requires DPoP. */
async function dpopSidecar (t: Test, options: { nonce?: boolean, rotateOnSwitch?: boolean, env?: Record<string, string>, tokens?: TokenServerOptions } = {}): Promise<{ h: Harness, api: Awaited<ReturnType<typeof dpopApi>> }> {
  let h: Harness | undefined
  const api = await dpopApi(t, () => h!.tokenServer, { nonce: options.nonce ?? false, rotateOnSwitch: options.rotateOnSwitch ?? false })
  h = await build(t, { AUTH_DPOP: 'true', BASE_URL: `${api.url}/v1`, ...options.env }, { dpop: { required: true }, ...options.tokens })
  await until(() => h!.app.credential.ready())
  return { h, api }
}

/** The sidecar's DPoP key: its algorithm and thumbprint. */
const keyOf = (h: Harness): { alg: string, thumbprint: string } => (h.app.credential as TokenLifecycle).proofKey!

const refused = (adminUrl: string, reason: string): Promise<number> =>
  metric(adminUrl, `auth_sidecar_dpop_proofs_refused_total{reason="${reason}",route="default"}`)

t.test('every request carries the DPoP-bound token and a fresh proof for its method and upstream URL', async (t) => {
  const { h, api } = await dpopSidecar(t)
  const grant = h.tokenServer.grants[0]!
  t.equal(grant.status, 200)
  t.type(grant.jkt, 'string', 'the token request carried a valid proof')
  t.match(h.app.credential.current()?.header, /^DPoP /)

  const answers = [
    await fetch(`${h.proxyUrl}/items?page=2&q=a%20b`),
    await fetch(`${h.proxyUrl}/items/7`, { method: 'PUT', body: 'x'.repeat(1000) }),
    await fetch(`${h.proxyUrl}/items/7`, { method: 'DELETE' }),
    // the client's own proof goes no further: sent along, the API would see two
    await fetch(`${h.proxyUrl}/items`, { method: 'POST', body: '{}', headers: { dpop: 'a.forged.proof' } })
  ]
  t.same(answers.map((a) => a.status), [200, 200, 200, 200])
  t.same(api.calls.map((c) => [c.method, c.url, c.status]), [
    ['GET', '/v1/items?page=2&q=a%20b', 200],
    ['PUT', '/v1/items/7', 200],
    ['DELETE', '/v1/items/7', 200],
    ['POST', '/v1/items', 200]
  ])
  t.same(api.calls.map((c) => c.claims!.htu), [`${api.url}/v1/items`, `${api.url}/v1/items/7`, `${api.url}/v1/items/7`, `${api.url}/v1/items`], 'htu: after the base path, no query')
  t.same(api.calls.map((c) => c.claims!.htm), ['GET', 'PUT', 'DELETE', 'POST'])
  t.equal(new Set(api.calls.map((c) => c.claims!.jti)).size, 4, 'a new jti each time')
  t.equal(api.calls[1]!.bodyBytes, 1000)
  t.equal(await refused(h.adminUrl, 'use_dpop_nonce'), 0)
  t.equal(await refused(h.adminUrl, 'invalid_dpop_proof'), 0)
})

t.test('the key: the token\'s cnf.jkt, the proofs\' jwk and the thumbprint the sidecar reports are one; a key per start', async (t) => {
  const { h, api } = await dpopSidecar(t)
  await fetch(`${h.proxyUrl}/a`)
  const token = h.app.credential.current()!.header.slice('DPoP '.length)
  const cnf = (JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as { cnf: { jkt: string } }).cnf
  t.equal(cnf.jkt, h.tokenServer.grants[0]!.jkt)
  t.equal(cnf.jkt, keyOf(h).thumbprint)
  t.equal(api.calls[0]!.status, 200, 'the API checked the proof\'s key against cnf.jkt')

  const other = await dpopSidecar(t)
  t.not(keyOf(other.h).thumbprint, cnf.jkt, 'another start, another key')
})

t.test('EdDSA, RS256 and PS256 keys make proofs the API accepts', async (t) => {
  for (const alg of ['EdDSA', 'RS256', 'PS256']) {
    const { h, api } = await dpopSidecar(t, { env: { AUTH_DPOP_ALG: alg } })
    t.equal((await fetch(`${h.proxyUrl}/x`)).status, 200, alg)
    t.equal(keyOf(h).alg, alg)
    t.equal(api.calls[0]!.status, 200)
  }
})

t.test('an upstream nonce: one replay with it, then the newest nonce in every proof, never a loop', async (t) => {
  const { h, api } = await dpopSidecar(t, { nonce: true })
  t.equal((await fetch(`${h.proxyUrl}/a`)).status, 200)
  t.same(api.calls.map((c) => [c.status, c.error]), [[401, 'use_dpop_nonce'], [200, undefined]], 'asked for a nonce, the request went once more')
  t.equal(api.calls[1]!.claims!.nonce, api.proofs.nonce)
  t.not(api.calls[0]!.claims, api.calls[1]!.claims)

  t.equal((await fetch(`${h.proxyUrl}/b`)).status, 200)
  t.equal(api.calls.length, 3, 'the nonce kept: no 401 the second time')

  const rotated = api.proofs.rotateNonce()
  t.equal((await fetch(`${h.proxyUrl}/c`)).status, 200)
  t.same(api.calls.slice(3).map((c) => c.status), [401, 200])
  t.equal(api.calls[4]!.claims!.nonce, rotated, 'the newest nonce')
  t.equal(await refused(h.adminUrl, 'use_dpop_nonce'), 2)
  t.equal(h.tokenServer.grants.length, 1, 'a nonce is no reason to renew the token')
})

t.test('a request with a body asked for a nonce gets the 401 (it cannot be sent again); the next one carries the nonce', async (t) => {
  const { h, api } = await dpopSidecar(t, { nonce: true })
  const first = await fetch(`${h.proxyUrl}/upload`, { method: 'POST', body: 'payload' })
  t.equal(first.status, 401)
  t.match(first.headers.get('www-authenticate'), /error="use_dpop_nonce"/)
  t.equal(api.calls.length, 1)
  t.equal((await fetch(`${h.proxyUrl}/upload`, { method: 'POST', body: 'payload' })).status, 200)
  t.equal(api.calls[1]!.claims!.nonce, api.proofs.nonce)
})

/** An upstream that answers every request 401 with this WWW-Authenticate (and a new nonce each time). */
async function refusingUpstream (t: Test, challenge: string): Promise<{ url: string, seen: string[] }> {
  const seen: string[] = []
  let n = 0
  const server = createServer((req, res) => {
    seen.push(String(req.headers.dpop))
    req.resume()
    res.writeHead(401, { 'www-authenticate': challenge, 'dpop-nonce': `nonce-${++n}` })
    res.end()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen }
}

t.test('an upstream that asks for a new nonce every time: two requests, then the 401 goes to the client', async (t) => {
  const upstream = await refusingUpstream(t, 'DPoP algs="ES256", error="use_dpop_nonce"')
  const h = await build(t, { AUTH_DPOP: 'true', BASE_URL: upstream.url }, { dpop: { required: true } })
  await until(() => h.app.credential.ready())
  const answer = await fetch(`${h.proxyUrl}/x`)
  t.equal(answer.status, 401)
  t.equal(upstream.seen.length, 2, 'one replay, no loop')
  const nonceOf = (proof: string): unknown => (JSON.parse(Buffer.from(proof.split('.')[1]!, 'base64url').toString()) as { nonce?: string }).nonce
  t.equal(nonceOf(upstream.seen[1]!), 'nonce-1')
  t.equal(h.tokenServer.grants.length, 1, 'the token was not renewed')
  t.equal(await refused(h.adminUrl, 'use_dpop_nonce'), 2)
})

t.test('an invalid_dpop_proof 401 reaches the client, is counted, and neither renews the token nor replays', async (t) => {
  const upstream = await refusingUpstream(t, 'DPoP algs="ES256", error="invalid_dpop_proof", error_description="iat too old"')
  const h = await build(t, { AUTH_DPOP: 'true', BASE_URL: upstream.url }, { dpop: { required: true } })
  await until(() => h.app.credential.ready())
  t.equal((await fetch(`${h.proxyUrl}/x`)).status, 401)
  t.equal(upstream.seen.length, 1)
  t.equal(h.tokenServer.grants.length, 1)
  t.equal(await refused(h.adminUrl, 'invalid_dpop_proof'), 1)
})

t.test('a token the API refuses (invalid_token): renewed, and the request replayed with a proof for the new token', async (t) => {
  const { h, api } = await dpopSidecar(t)
  h.tokenServer.revoke(h.app.credential.current()!.header.slice('DPoP '.length))
  t.equal((await fetch(`${h.proxyUrl}/x`)).status, 200)
  t.same(api.calls.map((c) => [c.status, c.error]), [[401, 'invalid_token'], [200, undefined]])
  t.equal(h.tokenServer.grants.length, 2, 'a new token')
  t.not(api.calls[0]!.claims, api.calls[1]!.claims)
  t.equal(await refused(h.adminUrl, 'invalid_dpop_proof'), 0, 'not a refused proof')
})

t.test('a WebSocket handshake carries a proof (htu with http), and answers a nonce request once', async (t) => {
  const { h, api } = await dpopSidecar(t, { nonce: true })
  const ws = new WebSocket(`${h.proxyUrl.replace('http', 'ws')}/socket?room=1`)
  const echoed = await new Promise<string>((resolve, reject) => {
    ws.once('open', () => ws.send('hi'))
    ws.once('message', (data) => resolve(String(data)))
    ws.once('error', reject)
  })
  ws.close()
  t.equal(echoed, 'echo hi')
  t.same(api.calls.map((c) => [c.websocket, c.status, c.error]), [[true, 401, 'use_dpop_nonce'], [true, 101, undefined]])
  t.match(api.calls[1]!.claims, { htm: 'GET', htu: `${api.url}/v1/socket`, nonce: api.proofs.nonce })
  t.equal(await refused(h.adminUrl, 'use_dpop_nonce'), 1)
})

t.test('a nonce the upstream sends with a WebSocket\'s 101 is the one the next proof carries', async (t) => {
  const { h, api } = await dpopSidecar(t, { nonce: true, rotateOnSwitch: true })
  t.equal((await fetch(`${h.proxyUrl}/a`)).status, 200)
  const ws = new WebSocket(`${h.proxyUrl.replace('http', 'ws')}/socket`)
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve())
    ws.once('error', reject)
  })
  ws.close()
  const switched = api.proofs.nonce
  t.equal((await fetch(`${h.proxyUrl}/b`)).status, 200)
  t.same(api.calls.map((c) => [c.websocket, c.status]), [[false, 401], [false, 200], [true, 101], [false, 200]], 'the request after the switch needed no replay')
  t.equal(api.calls.at(-1)!.claims!.nonce, switched, 'its proof carried the nonce of the 101')
})

t.test('token requests carry proofs: the nonce asked for once, refresh and logout proven too', async (t) => {
  const { h } = await dpopSidecar(t, { tokens: { dpop: { required: true, nonce: true }, accessTokenSeconds: 2 } })
  t.same(h.tokenServer.grants.map((g) => [g.grantType, g.status]), [['password', 400], ['password', 200]], 'one retry with the nonce')
  await until(() => h.tokenServer.grants.length >= 3, 5_000)
  t.same(h.tokenServer.grants.slice(2).map((g) => [g.grantType, g.status]), [['refresh_token', 200]], 'the nonce kept')
  const key = keyOf(h).thumbprint
  t.ok(h.tokenServer.grants.filter((g) => g.status === 200).every((g) => g.jkt === key), 'every grant bound to the sidecar\'s key')

  h.tokenServer.dpop.rotateNonce()
  await until(() => h.tokenServer.grants.length >= 5, 5_000)
  t.same(h.tokenServer.grants.slice(3, 5).map((g) => [g.grantType, g.status]), [['refresh_token', 400], ['refresh_token', 200]])

  await h.app.close(1_000)
  t.same(h.tokenServer.logouts.map((l) => [l.endpoint, l.status, l.jkt]), [['logout', 204, key]], 'the session ended with a proof')
})

t.test('a token server that keeps asking for a new nonce: one retry per attempt, then the usual backoff', async (t) => {
  const useNonce = (n: number): { status: number, body: string, headers: Record<string, string> } =>
    ({ status: 400, body: '{"error":"use_dpop_nonce","error_description":"Authorization server requires nonce in DPoP proof"}', headers: { 'dpop-nonce': `n${n}` } })
  const { h } = await dpopSidecar(t, { tokens: { dpop: { required: true } } })
  h.tokenServer.faults.push(useNonce(1), useNonce(2), useNonce(3), useNonce(4))
  h.tokenServer.revoke(h.app.credential.current()!.header.slice('DPoP '.length))
  h.app.credential.answered(h.app.credential.current()!, 401, undefined, undefined)
  await until(() => h.tokenServer.grants.filter((g) => g.status === 200).length === 2, 5_000)
  const renewal = h.tokenServer.grants.slice(1)
  t.same(renewal.map((g) => g.status), [400, 400, 400, 400, 200])
  t.ok(renewal[2]!.at - renewal[1]!.at >= 20, 'after two, the backoff (at least half of TOKEN_RETRY_MIN_MS, 50)')
})

t.test('a token_type other than DPoP: the token is not used, and readyz names the client setting', async (t) => {
  // the next attempt only after the test: a retry would meet a server that now binds its tokens
  const h = await build(t, { AUTH_DPOP: 'true', TOKEN_RETRY_MIN_MS: '20000', TOKEN_RETRY_MAX_MS: '20000', TOKEN_WAIT_MS: '100' }, {}, {
    faults: [{ status: 200, body: JSON.stringify({ access_token: 'a.b.c', token_type: 'Bearer', expires_in: 300 }), contentType: 'application/json' }]
  })
  await until(() => h.log.lines.some((l) => l.includes('Require DPoP bound tokens')))
  t.match(h.log.records().find((r) => r.outcome === 'unusable' || /Require DPoP/.test(String(r.reason)))!, { reason: /a Bearer token, not a DPoP-bound one: turn on "Require DPoP bound tokens"/ })
  t.equal((await fetch(`${h.adminUrl}/readyz`)).status, 503)
  t.equal((await fetch(`${h.proxyUrl}/x`)).status, 503, 'the token is not used as a bearer token')
  t.equal(h.upstream.received.length, 0)
})

t.test('a client that requires DPoP, a sidecar without AUTH_DPOP: the log says to set it', async (t) => {
  const h = await build(t, {}, { dpop: { required: true } })
  await until(() => h.log.lines.some((l) => l.includes('AUTH_DPOP=true')))
  t.equal((await fetch(`${h.adminUrl}/readyz`)).status, 503)
})

t.test('a proof\'s key is public: no private part in the header the API sees', async (t) => {
  let proof = ''
  const seen = createServer((req, res) => { proof = String(req.headers.dpop); res.end() })
  await new Promise<void>((resolve) => seen.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { seen.close() })
  const other = await build(t, { AUTH_DPOP: 'true', BASE_URL: `http://127.0.0.1:${(seen.address() as AddressInfo).port}` }, { dpop: { required: true } })
  await until(() => other.app.credential.ready())
  await fetch(`${other.proxyUrl}/x`)
  const header = decodeProtectedHeader(proof) as { typ: string, alg: string, jwk: JWK }
  t.same(Object.keys(header.jwk).sort(), ['crv', 'kty', 'x', 'y'])
  t.equal(await calculateJwkThumbprint(header.jwk), keyOf(other).thumbprint)
  t.equal(header.typ, 'dpop+jwt')
})
