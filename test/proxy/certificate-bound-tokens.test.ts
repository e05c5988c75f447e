import { readFileSync, renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { TLSSocket } from 'node:tls'
import t from 'tap'
import { build, send, until } from '../helpers/build.js'
import { TestCa } from '../helpers/certificates.js'

function replace (file: string, text: string): void {
  writeFileSync(`${file}.new`, text)
  renameSync(`${file}.new`, file)
}

t.test('tls_client_auth and certificate-bound tokens: the certificate is the client\'s proof, the token goes only with it, and a renewed certificate brings a new token first', async (t) => {
  const dir = t.testdir({})
  const ca = TestCa.create(join(dir, 'ca'))
  const server = ca.issue('server', { cn: '127.0.0.1', san: 'IP:127.0.0.1' })
  const first = ca.issue('first', { cn: 'sidecar-first' })
  const second = ca.issue('second', { cn: 'sidecar-second' })
  const [certFile, keyFile] = [join(dir, 'tls.crt'), join(dir, 'tls.key')]
  writeFileSync(certFile, first.cert)
  writeFileSync(keyFile, first.key)
  const tls = { key: server.key, cert: server.cert, ca: readFileSync(ca.caFile, 'utf8') }
  const files = { TLS_CERT_FILE: certFile, TLS_KEY_FILE: keyFile, TLS_CA_FILE: ca.caFile }
  const h = await build(t, {
    AUTH_URL: '',
    AUTH_ISSUER_URL: '{issuer}',
    AUTH_GRANT_TYPE: 'client_credentials',
    AUTH_CLIENT_AUTH: 'tls_client_auth',
    AUTH_CLIENT_SECRET: '',
    AUTH_USERNAME: '',
    AUTH_PASSWORD: '',
    ...Object.fromEntries(Object.entries(files).flatMap(([name, file]) => [[`AUTH_${name}`, file], [`UPSTREAM_${name}`, file]]))
  }, { tls, mtls: { bound: true, aliases: true }, tlsClients: { 'legacy-app': 'sidecar-first' } }, { upstreamTls: tls })
  await until(() => h.app.credential.ready())
  t.equal((await send(`${h.proxyUrl}/x`)).status, 200)
  const grant = h.tokenServer.grants[0]!
  t.match(grant.path, /\/mtls\/token$/, 'the token endpoint\'s mTLS alias, from discovery')
  t.same(Object.keys(grant.form).sort(), ['client_id', 'grant_type'], 'the client id and nothing secret')
  t.equal(grant.certificate, h.app.certificates[0]!.files.certificate!.thumbprint)
  t.match(h.upstream.received.at(-1), { tokenValid: true, certificate: { subject: 'sidecar-first', x5t: grant.certificate } }, 'the bound token with its certificate')

  // steady traffic while the files are renewed
  const statuses: number[] = []
  let running = true
  const traffic = Promise.all(Array.from({ length: 4 }, async () => {
    while (running) statuses.push((await fetch(`${h.proxyUrl}/y`)).status)
  }))
  await new Promise((resolve) => setTimeout(resolve, 300))
  h.tokenServer.tlsClients['legacy-app'] = 'sidecar-second'
  replace(keyFile, second.key)
  replace(certFile, second.cert)
  await until(() => h.upstream.received.at(-1)?.certificate?.subject === 'sidecar-second', 5_000)
  await new Promise((resolve) => setTimeout(resolve, 300))
  running = false
  await traffic
  t.ok(statuses.length > 20, `${statuses.length} requests during the renewal`)
  t.same([...new Set(statuses)], [200], 'every one answered 200')
  t.same(h.upstream.received.filter((r) => !r.tokenValid).map((r) => r.tokenReason), [], 'never a token with another certificate than its own')
  const renewed = h.tokenServer.grants.at(-1)!
  t.equal(renewed.certificate, h.app.certificates[0]!.files.certificate!.thumbprint, 'a new grant with the new certificate')
  t.equal(renewed.status, 200)

  await h.app.close(1_000)
  t.match(h.tokenServer.logouts, [{ endpoint: 'revoke', status: 200, form: { client_id: 'legacy-app' } }], 'the token revoked at shutdown, the client authenticated by its certificate')
})

t.test('an expired client certificate is shown to the auth server for nothing, discovery included: unready, naming the file, until a renewed one comes', async (t) => {
  const dir = t.testdir({})
  const ca = TestCa.create(join(dir, 'ca'))
  const server = ca.issue('server', { cn: '127.0.0.1', san: 'IP:127.0.0.1' })
  const expired = ca.issue('expired', { cn: 'sidecar-expired', notBefore: new Date(Date.now() - 3 * 86400_000), notAfter: new Date(Date.now() - 86400_000) })
  const renewed = ca.issue('renewed', { cn: 'sidecar-renewed' })
  const [certFile, keyFile] = [join(dir, 'tls.crt'), join(dir, 'tls.key')]
  writeFileSync(certFile, expired.cert)
  writeFileSync(keyFile, expired.key)
  const h = await build(t, {
    AUTH_URL: '',
    AUTH_ISSUER_URL: '{issuer}',
    AUTH_GRANT_TYPE: 'client_credentials',
    AUTH_CLIENT_AUTH: 'tls_client_auth',
    AUTH_CLIENT_SECRET: '',
    AUTH_USERNAME: '',
    AUTH_PASSWORD: '',
    AUTH_TLS_CERT_FILE: certFile,
    AUTH_TLS_KEY_FILE: keyFile,
    AUTH_TLS_CA_FILE: ca.caFile
  }, { tls: { key: server.key, cert: server.cert, ca: readFileSync(ca.caFile, 'utf8') }, tlsClients: { 'legacy-app': 'sidecar-renewed' } })
  // every certificate any TLS connection to the auth server presented
  const shown: string[] = []
  h.tokenServer.server.on('secureConnection', (socket: TLSSocket) => { shown.push(String(socket.getPeerCertificate().subject?.CN ?? 'none')) })
  await until(() => h.log.records().some((r) => r.event === 'discovery' && /expired/.test(String(r.reason))), 5_000)
  await new Promise((resolve) => setTimeout(resolve, 300))
  const ready = await send(`${h.adminUrl}/readyz`)
  t.equal(ready.status, 503)
  t.match(JSON.parse(ready.body).reason, /^the client credential cannot be used \(the certificate in AUTH_TLS_CERT_FILE expired at \d{4}-/)
  t.same(shown, [], 'no connection to the auth server at all: the expired certificate was never shown')
  t.equal(h.tokenServer.discoveries, 0)

  replace(keyFile, renewed.key)
  replace(certFile, renewed.cert)
  await until(() => h.app.credential.ready(), 5_000)
  t.equal((await send(`${h.proxyUrl}/x`)).status, 200)
  t.ok(shown.length > 0 && shown.every((cn) => cn === 'sidecar-renewed'), `only the renewed certificate was shown (${shown.join(', ')})`)
})

for (const first of ['auth', 'upstream'] as const) {
  t.test(`the same certificate in two files, one for the auth server and one for the upstream, renewed apart (the ${first} copy first): token and certificate always match`, async (t) => {
    const dir = t.testdir({})
    const ca = TestCa.create(join(dir, 'ca'))
    const server = ca.issue('server', { cn: '127.0.0.1', san: 'IP:127.0.0.1' })
    const old = ca.issue('old', { cn: 'sidecar-old' })
    const renewed = ca.issue('renewed', { cn: 'sidecar-renewed' })
    const copies = { auth: { cert: join(dir, 'auth.crt'), key: join(dir, 'auth.key') }, upstream: { cert: join(dir, 'upstream.crt'), key: join(dir, 'upstream.key') } }
    for (const copy of Object.values(copies)) {
      writeFileSync(copy.cert, old.cert)
      writeFileSync(copy.key, old.key)
    }
    const tls = { key: server.key, cert: server.cert, ca: readFileSync(ca.caFile, 'utf8') }
    const h = await build(t, {
      AUTH_URL: '',
      AUTH_ISSUER_URL: '{issuer}',
      AUTH_GRANT_TYPE: 'client_credentials',
      AUTH_CLIENT_AUTH: 'tls_client_auth',
      AUTH_CLIENT_SECRET: '',
      AUTH_USERNAME: '',
      AUTH_PASSWORD: '',
      AUTH_TLS_CERT_FILE: copies.auth.cert,
      AUTH_TLS_KEY_FILE: copies.auth.key,
      AUTH_TLS_CA_FILE: ca.caFile,
      UPSTREAM_TLS_CERT_FILE: copies.upstream.cert,
      UPSTREAM_TLS_KEY_FILE: copies.upstream.key,
      UPSTREAM_TLS_CA_FILE: ca.caFile
    }, { tls, mtls: { bound: true }, tlsClients: { 'legacy-app': 'sidecar-old' } }, { upstreamTls: tls })
    await until(() => h.app.credential.ready())
    h.tokenServer.tlsClients['legacy-app'] = 'sidecar-renewed'

    const statuses: number[] = []
    let running = true
    const traffic = Promise.all(Array.from({ length: 4 }, async () => {
      while (running) statuses.push((await fetch(`${h.proxyUrl}/y`)).status)
    }))
    const second = first === 'auth' ? 'upstream' : 'auth'
    replace(copies[first].key, renewed.key)
    replace(copies[first].cert, renewed.cert)
    await until(() => h.log.lines.filter((l) => l.includes('client certificate renewed')).length === 1, 4_000)
    // the other copy comes a while later, as another Secret's volume would
    await new Promise((resolve) => setTimeout(resolve, 1_500))
    replace(copies[second].key, renewed.key)
    replace(copies[second].cert, renewed.cert)
    await until(() => h.upstream.received.at(-1)?.certificate?.subject === 'sidecar-renewed', 5_000)
    await new Promise((resolve) => setTimeout(resolve, 300))
    running = false
    await traffic
    t.ok(statuses.length > 40, `${statuses.length} requests across both renewals`)
    t.same([...new Set(statuses)], [200], 'every one answered 200')
    const mismatched = h.upstream.received.filter((r) => !r.tokenValid)
    t.same(mismatched.map((r) => r.tokenReason), [], 'no token ever went over a connection presenting another certificate than its own')
    t.equal(h.tokenServer.grants.filter((g) => g.status === 200).length, 2, 'one grant with each certificate, no renewal driven by a 401')
  })
}
