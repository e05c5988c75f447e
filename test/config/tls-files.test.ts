import { execFileSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { rootCertificates } from 'node:tls'
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { ConfigError } from '../../src/errors.js'
import { TestCa } from '../helpers/certificates.js'

const BASE = { BASE_URL: 'https://api.example.com', AUTH_URL: 'https://sso.example.com', AUTH_CLIENT_ID: 'legacy-app', AUTH_USERNAME: 'u', AUTH_PASSWORD: 'p' }

function problems (env: Record<string, string>, cwd: string): string[] {
  try {
    loadConfig({ ...BASE, ...env }, { cwd })
    return []
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err
    return [...err.problems]
  }
}

t.test('TLS files are checked at start, each mistake naming its variable, never the content', async (t) => {
  const dir = t.testdir({ 'not-pem.txt': 'hello' })
  const ca = TestCa.create(join(dir, 'ca'))
  const a = ca.issue('a', { cn: 'a' })
  const b = ca.issue('b', { cn: 'b', keyType: 'rsa' })
  const encrypted = join(dir, 'encrypted.key')
  execFileSync('openssl', ['pkcs8', '-topk8', '-in', a.keyFile, '-out', encrypted, '-v2', 'aes-256-cbc', '-passout', 'pass:secret'])
  const expired = ca.issue('expired', { cn: 'expired', notBefore: new Date(Date.now() - 3 * 86400_000), notAfter: new Date(Date.now() - 86400_000) })

  t.same(problems({ UPSTREAM_TLS_CERT_FILE: a.certFile, UPSTREAM_TLS_KEY_FILE: a.keyFile, UPSTREAM_TLS_CA_FILE: ca.caFile }, dir), [], 'a good set')
  t.same(problems({ UPSTREAM_TLS_CERT_FILE: a.certFile }, dir), ['UPSTREAM_TLS_CERT_FILE is set without UPSTREAM_TLS_KEY_FILE: give the certificate\'s key'])
  t.same(problems({ AUTH_TLS_KEY_FILE: a.keyFile }, dir), ['AUTH_TLS_KEY_FILE is set without AUTH_TLS_CERT_FILE: give the key\'s certificate'])
  t.same(problems({ UPSTREAM_TLS_CERT_FILE: a.certFile, UPSTREAM_TLS_KEY_FILE: b.keyFile }, dir), ['UPSTREAM_TLS_KEY_FILE holds a key that is not the one of the certificate in UPSTREAM_TLS_CERT_FILE'])
  t.same(problems({ UPSTREAM_TLS_CERT_FILE: a.certFile, UPSTREAM_TLS_KEY_FILE: encrypted }, dir), ['UPSTREAM_TLS_KEY_FILE holds an encrypted key: give it unencrypted (PEM: PKCS#8, PKCS#1 or SEC1)'])
  t.same(problems({ UPSTREAM_TLS_CA_FILE: 'not-pem.txt' }, dir), ['UPSTREAM_TLS_CA_FILE holds no PEM certificate'], 'relative to the working directory')
  t.same(problems({ AUTH_TLS_CERT_FILE: a.keyFile, AUTH_TLS_KEY_FILE: a.keyFile }, dir), ['AUTH_TLS_CERT_FILE holds no PEM certificate'])
  t.same(problems({ AUTH_TLS_CERT_FILE: join(dir, 'gone.pem'), AUTH_TLS_KEY_FILE: a.keyFile }, dir), ['AUTH_TLS_CERT_FILE cannot be read (ENOENT)'])
  t.same(problems({ UPSTREAM_TLS_CERT_FILE: expired.certFile, UPSTREAM_TLS_KEY_FILE: expired.keyFile }, dir), [], 'an expired certificate is not a configuration error: the sidecar waits for a renewed one, unready')
  t.same(problems({ AUTH_CLIENT_AUTH: 'tls_client_auth', AUTH_GRANT_TYPE: 'client_credentials' }, dir),
    ['AUTH_TLS_CERT_FILE and AUTH_TLS_KEY_FILE are required with AUTH_CLIENT_AUTH=tls_client_auth: the certificate the client authenticates with'])
  t.same(problems({ AUTH_CLIENT_AUTH: 'tls_client_auth', AUTH_GRANT_TYPE: 'client_credentials', AUTH_USERNAME: '', AUTH_PASSWORD: '', AUTH_TLS_CERT_FILE: a.certFile, AUTH_TLS_KEY_FILE: a.keyFile }, dir), [], 'no secret needed')

  // a CA file may be a whole bundle: Node's own CAs and the test CA, some 220 KB
  const bundle = join(dir, 'bundle.pem')
  writeFileSync(bundle, [...rootCertificates, readFileSync(ca.caFile, 'utf8')].join('\n'))
  t.same(problems({ UPSTREAM_TLS_CA_FILE: bundle, AUTH_TLS_CA_FILE: bundle }, dir), [], 'a CA bundle')
  const huge = join(dir, 'huge.pem')
  writeFileSync(huge, Array.from({ length: 6 }, () => rootCertificates.join('\n')).join('\n'))
  t.same(problems({ UPSTREAM_TLS_CA_FILE: huge }, dir), ['UPSTREAM_TLS_CA_FILE is larger than 1024 KiB'])

  const all = problems({ UPSTREAM_TLS_CERT_FILE: a.certFile, UPSTREAM_TLS_KEY_FILE: b.keyFile, AUTH_TLS_CERT_FILE: a.certFile, AUTH_TLS_KEY_FILE: encrypted }, dir).join('\n')
  t.notMatch(all, /BEGIN|PRIVATE/, 'no file content in any message')
})

t.test('a route\'s upstream TLS files: its own named as its own, the others the default route\'s', async (t) => {
  const dir = t.testdir({})
  const ca = TestCa.create(join(dir, 'ca'))
  const a = ca.issue('a', { cn: 'a' })
  const b = ca.issue('b', { cn: 'b' })
  const route = { ROUTE_BILLING_BASE_URL: 'https://billing.example.com', ROUTE_BILLING_PATH: '/billing' }
  const withDefault = { UPSTREAM_TLS_CERT_FILE: a.certFile, UPSTREAM_TLS_KEY_FILE: a.keyFile, UPSTREAM_TLS_CA_FILE: ca.caFile }
  t.same(problems({ ...withDefault, ...route, ROUTE_BILLING_UPSTREAM_TLS_CERT_FILE: b.certFile }, dir),
    ['UPSTREAM_TLS_KEY_FILE holds a key that is not the one of the certificate in ROUTE_BILLING_UPSTREAM_TLS_CERT_FILE'])
  const config = loadConfig({ ...BASE, ...withDefault, ...route, ROUTE_BILLING_UPSTREAM_TLS_CERT_FILE: b.certFile, ROUTE_BILLING_UPSTREAM_TLS_KEY_FILE: b.keyFile, ROUTE_OTHER_BASE_URL: 'https://other.example.com', ROUTE_OTHER_PATH: '/other' }, { cwd: dir })
  const [main, billing, other] = config.routes
  t.same(billing!.tls, { certFile: b.certFile, keyFile: b.keyFile, caFile: ca.caFile, names: { cert: 'ROUTE_BILLING_UPSTREAM_TLS_CERT_FILE', key: 'ROUTE_BILLING_UPSTREAM_TLS_KEY_FILE', ca: 'UPSTREAM_TLS_CA_FILE' } }, 'its own pair, the default route\'s CA, each named by the variable that set it')
  t.equal(other!.tls, main!.tls, 'a route that names none shares the default route\'s')
  const onlyCa = loadConfig({ ...BASE, ...route, ROUTE_BILLING_UPSTREAM_TLS_CA_FILE: ca.caFile }, { cwd: dir })
  t.same(onlyCa.routes[1]!.tls!.names, { cert: 'UPSTREAM_TLS_CERT_FILE', key: 'UPSTREAM_TLS_KEY_FILE', ca: 'ROUTE_BILLING_UPSTREAM_TLS_CA_FILE' }, 'a route that sets only its CA file: that file is named by its own variable')
  const auth = loadConfig({ ...BASE, AUTH_URL: 'https://sso.example.com', ...route, ROUTE_BILLING_AUTH_TLS_CA_FILE: ca.caFile }, { cwd: dir })
  const billingAuth = auth.routes[1]!.credential.auth
  t.same(billingAuth.mode === 'oauth2' ? billingAuth.tls?.names : undefined, { cert: 'AUTH_TLS_CERT_FILE', key: 'AUTH_TLS_KEY_FILE', ca: 'ROUTE_BILLING_AUTH_TLS_CA_FILE' }, 'and so is its auth server\'s')
})

t.test('a client certificate for an http server is not presented: a warning, or an error where the client authenticates by it', async (t) => {
  const dir = t.testdir({})
  const ca = TestCa.create(join(dir, 'ca'))
  const a = ca.issue('a', { cn: 'a' })
  const pair = (prefix: string): Record<string, string> => ({ [`${prefix}_CERT_FILE`]: a.certFile, [`${prefix}_KEY_FILE`]: a.keyFile })
  const warned = (env: Record<string, string>): string[] => loadConfig({ ...BASE, ...env }, { cwd: dir }).warnings

  t.same(warned({ BASE_URL: 'http://api.internal', ...pair('UPSTREAM_TLS') }), ['UPSTREAM_TLS_CERT_FILE is not presented: BASE_URL is http'])
  t.same(warned({ AUTH_URL: 'http://sso.internal', AUTH_REALM: 'r', ...pair('AUTH_TLS') }), ['AUTH_TLS_CERT_FILE is not presented: http://sso.internal/auth/realms/r/protocol/openid-connect/token is http'])
  t.same(warned({ ...pair('UPSTREAM_TLS'), ...pair('AUTH_TLS') }), [], 'https both ways')
  t.same(warned({ BASE_URL: 'http://api.internal', UPSTREAM_TLS_CA_FILE: ca.caFile }), [], 'a CA file alone presents nothing')
  t.same(warned({ ...pair('UPSTREAM_TLS'), ROUTE_PLAIN_BASE_URL: 'http://plain.internal', ROUTE_PLAIN_PATH: '/plain' }), [], 'a route that only inherits the default route\'s certificate')
  t.same(warned({ ROUTE_PLAIN_BASE_URL: 'http://plain.internal', ROUTE_PLAIN_PATH: '/plain', ...pair('ROUTE_PLAIN_UPSTREAM_TLS') }),
    ['route plain: ROUTE_PLAIN_UPSTREAM_TLS_CERT_FILE is not presented: ROUTE_PLAIN_BASE_URL is http'])

  const client = { AUTH_GRANT_TYPE: 'client_credentials', AUTH_CLIENT_AUTH: 'tls_client_auth', AUTH_USERNAME: '', AUTH_PASSWORD: '', ...pair('AUTH_TLS') }
  t.same(problems({ ...client, AUTH_TOKEN_URL: 'http://sso.internal/token' }, dir),
    ['AUTH_CLIENT_AUTH=tls_client_auth needs an https auth server: http://sso.internal/token is http, where no client certificate is presented'])
  t.same(problems({ ...client, AUTH_ISSUER_URL: 'http://sso.internal/realms/r' }, dir),
    ['AUTH_CLIENT_AUTH=tls_client_auth needs an https auth server: http://sso.internal/realms/r is http, where no client certificate is presented'])
})


t.test('a large CA bundle is parsed by TLS once per change of its content: a file touched or rewritten the same is not parsed again, and no certificate of it is parsed twice', async (t) => {
  const dir = t.testdir({})
  const ca = TestCa.create(join(dir, 'ca'))
  const bundle = join(dir, 'bundle.pem')
  // a company bundle: Node's own CAs and the test CA, several hundred certificates
  const text = [...rootCertificates, readFileSync(ca.caFile, 'utf8')].join('\n')
  writeFileSync(bundle, text)
  const tls = await import('node:tls')
  const crypto = await import('node:crypto')
  const counts = { contexts: 0, parsed: 0 }
  const { TlsFiles } = await t.mockImport<typeof import('../../src/tls/files.js')>('../../src/tls/files.js', {
    'node:tls': { ...tls, createSecureContext: (...args: Parameters<typeof tls.createSecureContext>) => { counts.contexts++; return tls.createSecureContext(...args) } },
    '../../src/config/pem.js': await t.mockImport('../../src/config/pem.js', {
      'node:crypto': { ...crypto, X509Certificate: class extends crypto.X509Certificate { constructor (...args: ConstructorParameters<typeof crypto.X509Certificate>) { super(...args); counts.parsed++ } } }
    })
  })
  const { captureLogger } = await import('../helpers/log.js')
  const files = await TlsFiles.load('upstream', { caFile: bundle, names: { cert: 'UPSTREAM_TLS_CERT_FILE', key: 'UPSTREAM_TLS_KEY_FILE', ca: 'UPSTREAM_TLS_CA_FILE' } }, captureLogger().logger)
  files.watch()
  t.teardown(() => files.close())
  t.same(counts, { contexts: 1, parsed: 0 }, 'read at start: one TLS context, the certificates parsed by TLS only')
  let changes = 0
  files.on('change', () => { changes++ })
  for (let i = 0; i < 3; i++) {
    writeFileSync(bundle, text)
    await new Promise((resolve) => setTimeout(resolve, 1_300))
  }
  t.same(counts, { contexts: 1, parsed: 0 }, 'rewritten three times with the same content: nothing parsed again')
  writeFileSync(bundle, `${text}\n${readFileSync(ca.issue('intermediate', { cn: 'intermediate' }).certFile, 'utf8')}`)
  const { until } = await import('../helpers/build.js')
  await until(() => changes === 1, 4_000)
  t.same(counts, { contexts: 2, parsed: 0 }, 'changed: one new context, made once')
  const log = captureLogger()
  const watched = await TlsFiles.load('upstream', { caFile: bundle, names: { cert: 'UPSTREAM_TLS_CERT_FILE', key: 'UPSTREAM_TLS_KEY_FILE', ca: 'UPSTREAM_TLS_CA_FILE' } }, log.logger)
  watched.watch()
  t.teardown(() => watched.close())
  let taken = 0
  watched.on('change', () => { taken++ })
  const broken = [
    [`${text}\n-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n`, /UPSTREAM_TLS_CA_FILE holds a PEM block that is not a certificate \(the \d+th\)/],
    [text.slice(0, text.length - 200), /UPSTREAM_TLS_CA_FILE holds a PEM block without its end/]
  ] as const
  for (const [content, said] of broken) {
    writeFileSync(bundle, content)
    await until(() => log.records().some((r) => said.test(String(r.reason))), 4_000)
  }
  t.equal(taken, 0, 'a broken bundle is never taken, each said')
  t.equal(counts.parsed, 0, 'no certificate of the bundle parsed one by one')
})
