import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { X509Certificate } from 'node:crypto'
import { connect as tlsConnect, createServer as createTlsServer, type SecureContext } from 'node:tls'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { ConfigError, ForbiddenAddressError } from '../../src/errors.js'
import { ForwardCa } from '../../src/forward/ca.js'
import { absoluteTarget, allowing, checkedAddress, connectTarget } from '../../src/forward/destinations.js'
import { captureLogger } from '../helpers/log.js'
import { TestCa } from '../helpers/certificates.js'

const dir = mkdtempSync(join(tmpdir(), 'forward-settings-'))
const ca = TestCa.create(join(dir, 'ca'), 'forward CA')
const caKey = join(ca.dir, 'ca.key')
const other = TestCa.create(join(dir, 'other'), 'another CA')
const leaf = ca.issue('leaf', { cn: 'not a CA' })

const minimal = {
  BASE_URL: 'https://api.internal/v2/',
  AUTH_URL: 'https://sso.internal',
  AUTH_CLIENT_ID: 'legacy-app',
  AUTH_USERNAME: 'svc',
  AUTH_PASSWORD: 'pw-secret-123',
  FORWARD_PROXY_PORT: '3128'
}

function problems (env: NodeJS.ProcessEnv): readonly string[] {
  try {
    loadConfig(env, { cwd: '/nonexistent' })
  } catch (err) {
    if (err instanceof ConfigError) return err.problems
    throw err
  }
  return []
}

t.test('configuration errors name the variables', async (t) => {
  t.match(problems(minimal).join('\n'), /FORWARD_PROXY_CA_CERT_FILE and FORWARD_PROXY_CA_KEY_FILE are required with FORWARD_PROXY_PORT: BASE_URL is https/)
  t.same(problems({ ...minimal, BASE_URL: 'http://api.internal/v2' }), [], 'no CA needed when every route is http')
  t.match(problems({ ...minimal, FORWARD_PROXY_CA_CERT_FILE: ca.caFile }).join('\n'), /FORWARD_PROXY_CA_CERT_FILE is set without FORWARD_PROXY_CA_KEY_FILE/)
  t.match(problems({ ...minimal, FORWARD_PROXY_CA_CERT_FILE: ca.caFile, FORWARD_PROXY_CA_KEY_FILE: join(other.dir, 'ca.key') }).join('\n'), /FORWARD_PROXY_CA_KEY_FILE holds a key that is not the one of the CA in FORWARD_PROXY_CA_CERT_FILE/)
  t.match(problems({ ...minimal, FORWARD_PROXY_CA_CERT_FILE: leaf.certFile, FORWARD_PROXY_CA_KEY_FILE: leaf.keyFile }).join('\n'), /FORWARD_PROXY_CA_CERT_FILE holds a certificate that is not a CA/)
  t.match(problems({ ...minimal, BASE_URL: 'http://a/x', FORWARD_PROXY_PORT: '8080' }).join('\n'), /FORWARD_PROXY_PORT is PROXY_PORT's port too/)
  t.match(problems({ ...minimal, BASE_URL: 'http://a/x', FORWARD_PROXY_ALLOW: 'good.example, bad pattern' }).join('\n'), /FORWARD_PROXY_ALLOW holds "bad pattern"/)
  t.match(problems({ ...minimal, BASE_URL: 'http://a/x', FORWARD_PROXY_ALLOW: 'fe80::1%eth0,[fe80::1%eth0]:80' }), [/FORWARD_PROXY_ALLOW holds "fe80::1%eth0"/, /FORWARD_PROXY_ALLOW holds "\[fe80::1%eth0\]:80"/], 'an address with a zone is named, not a crash')
  t.match(problems({ ...minimal, BASE_URL: 'http://a/x/', ROUTE_TWO_BASE_URL: 'http://a/x', ROUTE_TWO_PATH: '/two' }).join('\n'), /ROUTE_TWO_BASE_URL and BASE_URL are both http:\/\/a\/x/)
  const joined = problems({ ...minimal, FORWARD_PROXY_CA_CERT_FILE: ca.caFile, FORWARD_PROXY_CA_KEY_FILE: join(other.dir, 'ca.key') }).join('\n')
  t.notMatch(joined, /BEGIN/, 'no key material in any message')

  const open = loadConfig({ ...minimal, BASE_URL: 'http://a/x', PROXY_HOST: '0.0.0.0' }, { cwd: '/nonexistent' })
  t.match(open.warnings.join('\n'), /FORWARD_PROXY_PORT listens on PROXY_HOST=0.0.0.0, not a loopback address/, 'a proxy open beyond the pod is said')
  const off = loadConfig({ ...minimal, FORWARD_PROXY_PORT: undefined, FORWARD_PROXY_ALLOW: 'x.example' }, { cwd: '/nonexistent' })
  t.equal(off.forward, undefined, 'off without a port')
  t.match(off.warnings.join('\n'), /FORWARD_PROXY_ALLOW is not used: FORWARD_PROXY_PORT is not set/)
  const on = loadConfig({ ...minimal, FORWARD_PROXY_CA_CERT_FILE: ca.caFile, FORWARD_PROXY_CA_KEY_FILE: caKey, FORWARD_PROXY_ALLOW: '*.Example.com:443, 10.0.0.1, [::1]:8443' }, { cwd: '/nonexistent' })
  t.same(on.forward?.allow, [{ host: 'example.com', kind: 'domain', port: 443 }, { host: '10.0.0.1', kind: 'ip' }, { host: '::1', kind: 'ip', port: 8443 }])
})

t.test('destinations: what a CONNECT or an absolute URL names, and which pattern allows it', async (t) => {
  t.match(connectTarget('API.example.com:443'), { origin: 'https://api.example.com', hostname: 'api.example.com', port: 443 })
  t.match(connectTarget('[::1]:8443'), { origin: 'https://[::1]:8443', hostname: '::1', port: 8443 })
  t.equal(connectTarget('api.example.com'), undefined, 'a CONNECT names its port')
  t.equal(connectTarget('user@api.example.com:443'), undefined, 'no user information')
  t.equal(connectTarget('api.example.com:0'), undefined)
  t.match(absoluteTarget('http://api.example.com:80/v1/x?y=%2F'), { scheme: 'http', destination: { origin: 'http://api.example.com' }, target: '/v1/x?y=%2F' })
  t.match(absoluteTarget('http://api.example.com?x'), { target: '/?x' })
  t.equal(absoluteTarget('/v1/x'), undefined, 'origin-form names no destination')
  t.equal(absoluteTarget('ftp://a/'), undefined)
  const patterns = loadConfig({ ...minimal, BASE_URL: 'http://a/', FORWARD_PROXY_ALLOW: '*.example.com:443,exact.test,169.254.169.254' }, { cwd: '/nonexistent' }).forward!.allow
  t.ok(allowing(patterns, connectTarget('a.b.example.com:443')!))
  t.notOk(allowing(patterns, connectTarget('example.com:443')!), '*.domain is its subdomains')
  t.notOk(allowing(patterns, connectTarget('a.example.com:8443')!), 'on its port only')
  t.ok(allowing(patterns, connectTarget('exact.test:22')!), 'a host without a port: any port')
  t.notOk(allowing(patterns, connectTarget('evil-exact.test:443')!))
  t.ok(allowing(patterns, connectTarget('169.254.169.254:80')!), 'an explicit IP pattern')
})

t.test('an allowed name that resolves to loopback, link-local or unspecified is refused; an IP pattern is reached', async (t) => {
  const byName = { host: 'localhost', kind: 'host' as const }
  await t.rejects(checkedAddress(connectTarget('localhost:443')!, byName, () => []), ForbiddenAddressError)
  t.equal(await checkedAddress(connectTarget('127.0.0.1:443')!, { host: '127.0.0.1', kind: 'ip' }, () => []), '127.0.0.1')
})

t.test('the CA: a certificate for exactly the host, never past the CA, renewed with the files; a bad pair keeps the good one', async (t) => {
  const files = { certFile: join(dir, 'ca.pem'), keyFile: join(dir, 'ca.key'), names: { cert: 'FORWARD_PROXY_CA_CERT_FILE', key: 'FORWARD_PROXY_CA_KEY_FILE' } }
  copyFileSync(ca.caFile, files.certFile)
  copyFileSync(caKey, files.keyFile)
  const log = captureLogger()
  const forward = await ForwardCa.load(files, log.logger)
  t.teardown(() => forward.close())
  forward.watch()
  const caNotAfter = new X509Certificate(readFileSync(ca.caFile)).validTo

  const shown = async (host: string, context: SecureContext): Promise<X509Certificate> => {
    const server = createTlsServer({ SNICallback: (_name, cb) => cb(null, context) })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    t.teardown(() => server.close())
    return await new Promise((resolve, reject) => {
      const socket = tlsConnect({ port: (server.address() as AddressInfo).port, host: '127.0.0.1', servername: host, rejectUnauthorized: false }, () => {
        resolve(socket.getPeerX509Certificate()!)
        socket.destroy()
      })
      socket.on('error', reject)
    })
  }
  const first = await shown('api.example.com', await forward.contextFor('api.example.com'))
  t.equal(first.subjectAltName, 'DNS:api.example.com')
  t.ok(first.checkIssued(new X509Certificate(readFileSync(ca.caFile))), 'signed by the CA')
  t.ok(new Date(first.validTo) <= new Date(caNotAfter), 'never past the CA')
  t.equal(await forward.contextFor('api.example.com'), await forward.contextFor('api.example.com'), 'made once, then kept')

  // a key that is not the CA's: the CA in use stays, said once
  writeFileSync(files.keyFile, readFileSync(join(other.dir, 'ca.key')))
  await new Promise((resolve) => setTimeout(resolve, 2_500))
  t.match(log.lines.join('\n'), /cannot be used: keeping the CA in use/)
  const still = await shown('api.example.com', await forward.contextFor('api.example.com'))
  t.equal(still.serialNumber, first.serialNumber, 'the good pair\'s certificate is still shown')

  // a new CA: certificates of the old one are not shown any more
  copyFileSync(other.caFile, files.certFile)
  await new Promise((resolve) => setTimeout(resolve, 2_500))
  const renewed = await shown('api.example.com', await forward.contextFor('api.example.com'))
  t.ok(renewed.checkIssued(new X509Certificate(readFileSync(other.caFile))), 'signed by the new CA')
  t.notMatch(log.lines.join('\n'), /PRIVATE KEY|BEGIN/, 'no key material in the log')
})
