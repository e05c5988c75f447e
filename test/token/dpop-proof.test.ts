import { createHash } from 'node:crypto'
import { calculateJwkThumbprint, decodeProtectedHeader, EmbeddedJWK, jwtVerify, type JWK } from 'jose'
import t from 'tap'
import { DpopVerifier } from '../../dev/dpop-proof.js'
import { DPOP_ALGORITHMS } from '../../src/config/schema.js'
import { dpopRefusalOf, hasDpopChallenge } from '../../src/token/challenge.js'
import { DpopKey, dpopNonceOf, htuOf } from '../../src/token/dpop.js'

const HTU = 'https://api.example.com/v1/items'

t.test('a proof is a dpop+jwt JWS that jose verifies with the public key it carries, for each algorithm', async (t) => {
  for (const alg of DPOP_ALGORITHMS) {
    const key = await DpopKey.generate(alg)
    const proof = key.proof('POST', HTU)
    const { payload, protectedHeader } = await jwtVerify(proof, EmbeddedJWK, { typ: 'dpop+jwt', algorithms: [alg] })
    t.equal(protectedHeader.alg, alg)
    const jwk = protectedHeader.jwk as JWK
    t.notOk('d' in jwk || 'p' in jwk, `${alg}: the public key only`)
    t.equal(await calculateJwkThumbprint(jwk), key.thumbprint, `${alg}: the thumbprint is the RFC 7638 one of that key`)
    t.same(Object.keys(payload).sort(), ['htm', 'htu', 'iat', 'jti'], `${alg}: no ath and no nonce when there is neither`)
    t.match(payload, { htm: 'POST', htu: HTU })
    t.ok(Math.abs((payload.iat as number) - Date.now() / 1000) <= 2, 'iat is now')
  }
})

t.test('ath is the base64url SHA-256 of the access token; nonce as given; a new jti every time', async (t) => {
  const key = await DpopKey.generate('ES256')
  const claims = (proof: string): Record<string, unknown> => JSON.parse(Buffer.from(proof.split('.')[1]!, 'base64url').toString()) as Record<string, unknown>
  const sha = (token: string): string => createHash('sha256').update(token).digest('base64url')
  const a = claims(key.proof('GET', HTU, { accessToken: 'token-one', nonce: 'n-1' }))
  t.equal(a.ath, sha('token-one'))
  t.equal(a.nonce, 'n-1')
  const b = claims(key.proof('GET', HTU, { accessToken: 'token-two' }))
  t.equal(b.ath, sha('token-two'), 'the hash follows the token')
  t.notOk('nonce' in b)
  const jtis = new Set(Array.from({ length: 1000 }, () => claims(key.proof('GET', HTU)).jti))
  t.equal(jtis.size, 1000)
  t.equal(decodeProtectedHeader(key.proof('GET', HTU)).typ, 'dpop+jwt')
})

t.test('two keys are two thumbprints', async (t) => {
  t.not((await DpopKey.generate('ES256')).thumbprint, (await DpopKey.generate('ES256')).thumbprint)
})

t.test('htu: scheme, host and path; no query, no fragment', async (t) => {
  t.equal(htuOf('https://api.example.com:8443/v1/a%20b?x=1&y=2#frag'), 'https://api.example.com:8443/v1/a%20b')
  t.equal(htuOf('http://127.0.0.1:80/'), 'http://127.0.0.1/')
  t.equal(htuOf('HTTP://API.example.COM/Path'), 'http://api.example.com/Path', 'scheme and host normalised, path kept')
})

t.test('DPoP-Nonce values: NQCHAR only, at most 512 characters', async (t) => {
  t.equal(dpopNonceOf('eyJ7S_zG.eyJH0-Z.HX4w-7v'), 'eyJ7S_zG.eyJH0-Z.HX4w-7v')
  for (const bad of ['', 'a b', 'a"b', 'a\\b', 'é', 'x'.repeat(513), undefined, ['a', 'b'], 7]) {
    t.equal(dpopNonceOf(bad as string), undefined, JSON.stringify(bad))
  }
})

t.test('a 401\'s WWW-Authenticate: the DPoP challenge\'s proof errors, nothing else', async (t) => {
  const cases: Array<[string | string[] | undefined, string | undefined]> = [
    ['DPoP error="use_dpop_nonce", error_description="Resource server requires nonce in DPoP proof"', 'use_dpop_nonce'],
    ['DPoP algs="ES256 PS256", error="invalid_dpop_proof"', 'invalid_dpop_proof'],
    ['DPoP error=use_dpop_nonce', 'use_dpop_nonce'],
    ['dpop ERROR = "use_dpop_nonce"', 'use_dpop_nonce'],
    ['Bearer realm="api", error="invalid_token", DPoP algs="ES256", error="use_dpop_nonce"', 'use_dpop_nonce'],
    [['Bearer error="invalid_token"', 'DPoP error="invalid_dpop_proof"'], 'invalid_dpop_proof'],
    ['DPoP algs="ES256", error="invalid_token"', undefined],
    ['Bearer error="use_dpop_nonce"', undefined],
    ['DPoP realm="error=\\"use_dpop_nonce\\""', undefined],
    ['DPoP error="use_dpop_nonce_x"', undefined],
    ['Basic realm="x"', undefined],
    [undefined, undefined],
    ['DPoP ' + 'a="b", '.repeat(2000) + 'error="use_dpop_nonce"', undefined]
  ]
  for (const [header, expected] of cases) t.equal(dpopRefusalOf(header), expected, JSON.stringify(header)?.slice(0, 80))
})

t.test('a DPoP challenge is told from a Bearer one, not from words inside a quoted value', async (t) => {
  t.equal(hasDpopChallenge('DPoP algs="ES256"'), true)
  t.equal(hasDpopChallenge('Bearer realm="api", DPoP algs="ES256"'), true)
  t.equal(hasDpopChallenge(['Bearer realm="api"', 'dpop']), true)
  t.equal(hasDpopChallenge('Bearer realm="api"'), false)
  t.equal(hasDpopChallenge('Bearer error_description="use, DPoP please"'), false)
  t.equal(hasDpopChallenge(undefined), false)
})

t.test('the tests\' verifier refuses what a resource server must refuse (RFC 9449 §4.3)', async (t) => {
  const key = await DpopKey.generate('ES256')
  const url = 'http://127.0.0.1:1/v1/x'
  const verifier = new DpopVerifier()
  t.match(await verifier.verify(key.proof('GET', url), { method: 'GET', url: `${url}?q=1` }), { ok: true, jkt: key.thumbprint })
  const refused = async (proof: string | undefined, expected: Partial<Parameters<DpopVerifier['verify']>[1]> = {}): Promise<string> => {
    const verdict = await verifier.verify(proof, { method: 'GET', url, ...expected })
    return verdict.ok ? 'accepted' : verdict.error
  }
  t.equal(await refused(key.proof('POST', url)), 'invalid_dpop_proof', 'htm')
  t.equal(await refused(key.proof('GET', 'http://127.0.0.1:1/v1/y')), 'invalid_dpop_proof', 'htu')
  const once = key.proof('GET', url)
  t.equal(await refused(once), 'accepted')
  t.equal(await refused(once), 'invalid_dpop_proof', 'a replayed jti')
  t.equal(await refused(key.proof('GET', url, { accessToken: 'a' }), { accessToken: 'b', boundTo: key.thumbprint }), 'invalid_dpop_proof', 'ath of another token')
  t.equal(await refused(key.proof('GET', url, { accessToken: 'a' }), { accessToken: 'a', boundTo: 'another-key' }), 'invalid_dpop_proof', 'a token bound to another key')
  t.equal(await refused(key.proof('GET', url, { accessToken: 'a' }), { accessToken: 'a', boundTo: key.thumbprint }), 'accepted')
  const [h, p, s] = key.proof('GET', url).split('.')
  t.equal(await refused(`${h}.${p}.${s!.slice(0, -4)}AAAA`), 'invalid_dpop_proof', 'a bad signature')
  t.equal(await refused(undefined), 'invalid_dpop_proof', 'no proof')
  t.equal(await refused(`${key.proof('GET', url)}, ${key.proof('GET', url)}`), 'invalid_dpop_proof', 'two proofs')

  const strict = new DpopVerifier({ nonce: true })
  t.equal(await strict.verify(key.proof('GET', url), { method: 'GET', url }).then((v) => v.ok ? 'accepted' : v.error), 'use_dpop_nonce')
  t.equal(await strict.verify(key.proof('GET', url, { nonce: strict.nonce }), { method: 'GET', url }).then((v) => v.ok), true)
  const old = strict.nonce
  strict.rotateNonce()
  t.equal(await strict.verify(key.proof('GET', url, { nonce: old }), { method: 'GET', url }).then((v) => v.ok ? 'accepted' : v.error), 'use_dpop_nonce')
})
