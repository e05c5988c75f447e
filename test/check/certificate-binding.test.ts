import t from 'tap'
import { certificateBinding } from '../../src/check/describe.js'

const jwt = (payload: object): string => ['{"alg":"RS256"}', JSON.stringify(payload), 'sig'].map((p, i) => i < 2 ? Buffer.from(p).toString('base64url') : p).join('.')
const mine = 'a'.repeat(43)
const other = 'b'.repeat(43)

t.test('check says what a token obtained with a client certificate is bound to, read for display only', async (t) => {
  t.same(certificateBinding({ accessToken: jwt({ cnf: { 'x5t#S256': mine } }), tokenType: 'Bearer', expiresInMs: 1 }, [{ route: 'default', thumbprint: mine }]),
    { text: '', failed: false }, 'no certificate to the auth server: nothing to say')

  const set = (accessToken: string): { accessToken: string, tokenType: string, expiresInMs: number, certificate: string } => ({ accessToken, tokenType: 'Bearer', expiresInMs: 1, certificate: mine })
  t.same(certificateBinding(set('an-opaque-token'), [{ route: 'default', thumbprint: mine }]),
    { text: '; the token is opaque: whether it is bound to the client certificate cannot be seen', failed: false })
  t.same(certificateBinding(set(jwt({ sub: 'x' })), [{ route: 'default', thumbprint: other }]),
    { text: '; not bound to the client certificate (no cnf x5t#S256)', failed: false }, 'an unbound token goes anywhere')
  t.same(certificateBinding(set(jwt({ cnf: { 'x5t#S256': mine } })), [{ route: 'default', thumbprint: mine }]),
    { text: `; bound to the client certificate (cnf x5t#S256 ${mine}), which the upstream gets too`, failed: false })

  const wrong = certificateBinding(set(jwt({ cnf: { 'x5t#S256': mine } })), [{ route: 'default', thumbprint: mine }, { route: 'billing', thumbprint: other }, { route: 'plain', thumbprint: undefined }])
  t.equal(wrong.failed, true)
  t.match(wrong.text, `but route billing's upstream gets x5t#S256 ${other}, route plain's upstream gets no client certificate: the token will be refused there`)
  t.notMatch(wrong.text, /the upstream gets/, 'the route whose upstream gets the certificate is not named')
})
