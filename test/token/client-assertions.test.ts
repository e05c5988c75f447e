import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import { calculateJwkThumbprint, decodeProtectedHeader, exportJWK, jwtVerify, SignJWT } from 'jose'
import t from 'tap'
import type { SecretValues } from '../../src/config/credentials.js'
import { CLIENT_ASSERTION_TYPE, ClientAuthenticator } from '../../src/token/client-auth.js'
import { GrantError } from '../../src/token/grant.js'

const TOKEN_URL = 'https://sso.example/realms/r/protocol/openid-connect/token'

/** A key pair in the forms a user may hand over. */
function keys () {
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 })
  const p256 = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const p384 = generateKeyPairSync('ec', { namedCurve: 'P-384' })
  const ed = generateKeyPairSync('ed25519')
  return [
    { name: 'RSA, PKCS#8 PEM', text: rsa.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string, publicKey: rsa.publicKey, alg: 'RS256' },
    { name: 'RSA, PKCS#1 PEM', text: rsa.privateKey.export({ type: 'pkcs1', format: 'pem' }) as string, publicKey: rsa.publicKey, alg: 'RS256' },
    { name: 'EC P-256, SEC1 PEM', text: p256.privateKey.export({ type: 'sec1', format: 'pem' }) as string, publicKey: p256.publicKey, alg: 'ES256' },
    { name: 'EC P-384, PKCS#8 PEM', text: p384.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string, publicKey: p384.publicKey, alg: 'ES384' },
    { name: 'Ed25519, PKCS#8 PEM', text: ed.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string, publicKey: ed.publicKey, alg: 'EdDSA' },
    { name: 'EC P-256, JWK with d', text: JSON.stringify(p256.privateKey.export({ format: 'jwk' })), publicKey: p256.publicKey, alg: 'ES256' }
  ]
}

const assertionOf = (fields: Array<[string, string]>): string => fields.find(([n]) => n === 'client_assertion')![1]

/** What one request carries from the client authentication `clientAuth` makes of `creds`, and the secrets it told. */
async function prove (client: { id?: string, clientAuth: ConstructorParameters<typeof ClientAuthenticator>[0]['clientAuth'], keyAlg?: 'PS256' | 'ES256', keyId?: string }, creds: SecretValues): Promise<{ fields: Array<[string, string]>, authorization: string | undefined, secrets: string[] }> {
  const secrets: string[] = []
  const clientId = client.id ?? 'legacy-app'
  const authenticator = new ClientAuthenticator({ clientId, clientAuth: client.clientAuth, ...(client.keyAlg !== undefined && { keyAlg: client.keyAlg }), ...(client.keyId !== undefined && { keyId: client.keyId }), onSecret: (v) => secrets.push(v) })
  const auth = await authenticator.forRequest(creds, TOKEN_URL)
  const body = new URLSearchParams()
  const headers = new Headers()
  await auth({ issuer: 'https://sso.example/realms/r', token_endpoint: TOKEN_URL }, { client_id: clientId }, body, headers)
  return { fields: [...body], authorization: headers.get('authorization') ?? undefined, secrets }
}

t.test('private_key_jwt: a fresh assertion per request with the claims of RFC 7523, for every kind of key', async (t) => {
  for (const key of keys()) {
    const before = Math.floor(Date.now() / 1000)
    const proof = await prove({ clientAuth: 'private_key_jwt' }, { clientKey: key.text })
    const names = proof.fields.map(([n]) => n)
    t.same(names, ['client_id', 'client_assertion_type', 'client_assertion'], `${key.name}: the client id and an assertion, no secret`)
    t.equal(proof.fields[1]![1], CLIENT_ASSERTION_TYPE)
    t.equal(proof.authorization, undefined)
    const assertion = assertionOf(proof.fields)
    const { payload, protectedHeader } = await jwtVerify(assertion, key.publicKey, { issuer: 'legacy-app', subject: 'legacy-app', audience: TOKEN_URL })
    t.equal(protectedHeader.alg, key.alg, `${key.name}: ${key.alg}`)
    t.equal(protectedHeader.typ, 'JWT')
    t.equal(protectedHeader.kid, await calculateJwkThumbprint(await exportJWK(key.publicKey)), 'kid: the key\'s RFC 7638 thumbprint')
    t.ok(payload.iat! >= before && payload.iat! <= before + 2)
    t.equal(payload.exp, payload.iat! + 60, 'valid for 60 s')
    t.match(payload.jti, /^[\w-]{20,}$/)
    const again = assertionOf((await prove({ clientAuth: 'private_key_jwt' }, { clientKey: key.text })).fields)
    t.not((await jwtVerify(again, key.publicKey)).payload.jti, payload.jti, 'a new jti each time')
    t.same(proof.secrets, [assertion], 'the assertion is handed to the scrubber')
  }
})

t.test('AUTH_CLIENT_KEY_ALG and AUTH_CLIENT_KEY_ID are used as given', async (t) => {
  const rsa = keys()[0]!
  const assertion = assertionOf((await prove({ id: 'c', clientAuth: 'private_key_jwt', keyAlg: 'PS256', keyId: 'key-2026' }, { clientKey: rsa.text })).fields)
  t.same(decodeProtectedHeader(assertion), { alg: 'PS256', typ: 'JWT', kid: 'key-2026' })
  await jwtVerify(assertion, rsa.publicKey, { algorithms: ['PS256'] })
  const client = new ClientAuthenticator({ clientId: 'c', clientAuth: 'private_key_jwt', keyAlg: 'PS256', keyId: 'key-2026', onSecret: () => {} })
  t.same(await client.keyDescription({ clientKey: rsa.text }), { alg: 'PS256', kid: 'key-2026' })
})

t.test('a rotated key file is used from the next request', async (t) => {
  const [first, , second] = keys()
  const client = new ClientAuthenticator({ clientId: 'c', clientAuth: 'private_key_jwt', onSecret: () => {} })
  const assertionWith = async (text: string): Promise<string> => {
    const body = new URLSearchParams()
    await (await client.forRequest({ clientKey: text }, TOKEN_URL))({ issuer: 'https://sso.example', token_endpoint: TOKEN_URL }, { client_id: 'c' }, body, new Headers())
    return body.get('client_assertion')!
  }
  const a1 = await assertionWith(first!.text)
  const a2 = await assertionWith(second!.text)
  await jwtVerify(a1, first!.publicKey)
  await jwtVerify(a2, second!.publicKey)
  t.not(decodeProtectedHeader(a1).kid, decodeProtectedHeader(a2).kid)
  await t.rejects(jwtVerify(a2, first!.publicKey), 'the old key no longer signs')
})

t.test('a key that cannot be used is an error naming the variable, never quoting the key; nothing is signed', async (t) => {
  const rsa = keys()[0]!
  for (const [text, why] of [['not a key at all', /neither a PEM private key nor a JWK/], [rsa.text, /ES256 does not fit a 2048-bit RSA key/], ['{"kty":"EC","crv":"P-256","x":"a","y":"b"}', /a JWK without its private part/]] as const) {
    const err = await prove({ id: 'c', clientAuth: 'private_key_jwt', keyAlg: 'ES256' }, { clientKey: text }).catch((e: unknown) => e)
    t.type(err, GrantError)
    t.equal((err as GrantError).kind, 'credential')
    t.match((err as Error).message, /^AUTH_CLIENT_KEY_FILE holds /)
    t.match((err as Error).message, why)
    t.notOk((err as Error).message.includes('PRIVATE KEY'))
  }
})

t.test('client_secret_jwt: HS256 with the client secret', async (t) => {
  const proof = await prove({ clientAuth: 'client_secret_jwt' }, { clientSecret: 'a-client-secret-of-32-bytes-or-more!' })
  t.notOk(proof.fields.some(([n]) => n === 'client_secret'), 'the secret itself is not sent')
  const { payload, protectedHeader } = await jwtVerify(assertionOf(proof.fields), new TextEncoder().encode('a-client-secret-of-32-bytes-or-more!'), { audience: TOKEN_URL, issuer: 'legacy-app', subject: 'legacy-app' })
  t.equal(protectedHeader.alg, 'HS256')
  t.equal(payload.exp, payload.iat! + 60)
})

async function federatedToken (key: KeyObject, exp: number): Promise<string> {
  return await new SignJWT({}).setProtectedHeader({ alg: 'ES256' }).setIssuer('https://kubernetes.default.svc').setSubject('system:serviceaccount:apps:legacy').setAudience('https://sso.example/realms/r').setExpirationTime(exp).sign(key)
}

t.test('federated_jwt: the file\'s JWT sent as it is; an expired one is an error naming the file, and nothing is sent', async (t) => {
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const valid = await federatedToken(privateKey, Math.floor(Date.now() / 1000) + 600)
  const proof = await prove({ clientAuth: 'federated_jwt' }, { clientAssertion: `${valid}\n` })
  t.same(proof.fields, [['client_id', 'legacy-app'], ['client_assertion_type', CLIENT_ASSERTION_TYPE], ['client_assertion', valid]])
  t.same(proof.secrets, [valid], 'the assertion is handed to the scrubber')
  const expired = await federatedToken(privateKey, Math.floor(Date.now() / 1000) - 5)
  const err = await prove({ clientAuth: 'federated_jwt' }, { clientAssertion: expired }).catch((e: unknown) => e) as GrantError
  t.equal(err.kind, 'credential')
  t.match(err.message, /^AUTH_CLIENT_ASSERTION_FILE holds a JWT that expired at \d{4}-/)
  t.notOk(err.message.includes(expired.split('.')[1]!))
  const garbage = await prove({ clientAuth: 'federated_jwt' }, { clientAssertion: 'not a jwt' }).catch((e: unknown) => e) as GrantError
  t.match(garbage.message, /^AUTH_CLIENT_ASSERTION_FILE holds no JWT/)
})

t.test('client_secret_post and _basic are as before: the secret in the form, or in a Basic header alone', async (t) => {
  const post = await prove({ id: 'c', clientAuth: 'client_secret_post' }, { clientSecret: 'secret' })
  t.same(post.fields, [['client_id', 'c'], ['client_secret', 'secret']])
  t.same(post.secrets, ['secret'])
  const basic = await prove({ id: 'c', clientAuth: 'client_secret_basic' }, { clientSecret: 'secret' })
  t.same(basic.fields, [])
  t.equal(basic.authorization, `Basic ${Buffer.from('c:secret').toString('base64')}`)
  t.same(basic.secrets, [Buffer.from('c:secret').toString('base64')], 'the header\'s value is handed to the scrubber')
  const none = await prove({ id: 'c', clientAuth: 'client_secret_post' }, {})
  t.same(none.fields, [['client_id', 'c']], 'no secret: a public client, its id alone')
})
