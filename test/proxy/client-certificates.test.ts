import { execFileSync, spawn } from 'node:child_process'
import { readFileSync, renameSync, writeFileSync } from 'node:fs'
import { createServer as createHttpsServer } from 'node:https'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { rootCertificates, type TLSSocket } from 'node:tls'
import t, { type Test } from 'tap'
import WebSocket, { WebSocketServer } from 'ws'
import { build, metric, send, until, type Harness } from '../helpers/build.js'
import { TestCa, type Issued } from '../helpers/certificates.js'
import { freePort } from '../helpers/process.js'
import { FakeUpstream } from '../helpers/upstream.js'

/** As cert-manager or the kubelet replace a file: a whole new file renamed into place. */
function replace (file: string, text: string): void {
  writeFileSync(`${file}.new`, text)
  renameSync(`${file}.new`, file)
}

interface Setup {
  ca: TestCa
  /** the files the sidecar is given (copies of `first`) */
  certFile: string
  keyFile: string
  first: Issued
  second: Issued
  upstream: FakeUpstream
}

/** A CA, two client certificates from it, and an HTTPS upstream that asks for one (and, with `require`, refuses a connection without). */
async function setup (t: Test, require = false): Promise<Setup> {
  const dir = t.testdir({})
  const ca = TestCa.create(join(dir, 'ca'))
  const server = ca.issue('server', { cn: '127.0.0.1', san: 'IP:127.0.0.1' })
  const first = ca.issue('first', { cn: 'sidecar-first' })
  const second = ca.issue('second', { cn: 'sidecar-second' })
  const certFile = join(dir, 'tls.crt')
  const keyFile = join(dir, 'tls.key')
  writeFileSync(certFile, first.cert)
  writeFileSync(keyFile, first.key)
  const upstream = new FakeUpstream(undefined, { key: server.key, cert: server.cert, ca: readFileSync(ca.caFile, 'utf8'), requireCertificate: require })
  await upstream.listen()
  t.teardown(async () => await upstream.close())
  return { ca, certFile, keyFile, first, second, upstream }
}

async function sidecar (t: Test, s: Setup, env: Record<string, string> = {}): Promise<Harness> {
  return await build(t, { BASE_URL: s.upstream.url, UPSTREAM_TLS_CERT_FILE: s.certFile, UPSTREAM_TLS_KEY_FILE: s.keyFile, UPSTREAM_TLS_CA_FILE: s.ca.caFile, ...env })
}

t.test('the upstream gets the client certificate; renewed files are used from the next connection on, no request failing', async (t) => {
  const s = await setup(t)
  const h = await sidecar(t, s)
  t.equal((await send(`${h.proxyUrl}/x`)).status, 200)
  t.equal(s.upstream.received.at(-1)!.certificate?.subject, 'sidecar-first')

  // steady traffic on kept-alive connections while the files are renewed
  const statuses: number[] = []
  let running = true
  const traffic = Promise.all(Array.from({ length: 4 }, async () => {
    while (running) statuses.push((await fetch(`${h.proxyUrl}/y`)).status)
  }))
  await new Promise((resolve) => setTimeout(resolve, 300))
  // the key first: for a moment the pair does not match, and is not used
  replace(s.keyFile, s.second.key)
  replace(s.certFile, s.second.cert)
  await until(() => s.upstream.received.at(-1)?.certificate?.subject === 'sidecar-second', 5_000)
  const switched = s.upstream.received.length
  await new Promise((resolve) => setTimeout(resolve, 300))
  running = false
  await traffic
  t.ok(statuses.length > 20, `${statuses.length} requests during the renewal`)
  t.same([...new Set(statuses)], [200], 'every one answered 200')
  t.same(new Set(s.upstream.received.slice(switched).map((r) => r.certificate?.subject)), new Set(['sidecar-second']), 'after the switch, only the new certificate')
  t.ok(h.log.lines.some((l) => l.includes('client certificate renewed')), 'the renewal is logged')
  t.notOk(h.log.lines.join('\n').includes('PRIVATE KEY'), 'no key material in the log')
})

t.test('files that cannot be used keep the good ones: said once, used when they change again', async (t) => {
  const s = await setup(t)
  const h = await sidecar(t, s)
  replace(s.certFile, '-----BEGIN CERTIFICATE-----\nhalf a certif')
  await until(() => h.log.lines.some((l) => l.includes('cannot be used: keeping')), 4_000)
  t.equal((await send(`${h.proxyUrl}/x`)).status, 200)
  t.equal(s.upstream.received.at(-1)!.certificate?.subject, 'sidecar-first', 'the old pair is still presented')
  replace(s.certFile, s.second.cert) // the key is still the first's: the pair does not match
  const told = (): string[] => h.log.lines.filter((l) => l.includes('cannot be used: keeping'))
  await until(() => told().length === 2, 4_000)
  t.match(told()[1], /UPSTREAM_TLS_KEY_FILE holds a key that is not the one of the certificate in UPSTREAM_TLS_CERT_FILE/)
  replace(s.keyFile, s.second.key)
  await until(() => h.log.lines.some((l) => l.includes('client certificate renewed')), 4_000)
  t.equal(told().length, 2, 'each problem said once')
  t.equal((await send(`${h.proxyUrl}/x`)).status, 200)
  t.equal(s.upstream.received.at(-1)!.certificate?.subject, 'sidecar-second')
})

t.test('an expired certificate is never presented: unready, naming the file, until a renewed one comes', async (t) => {
  const s = await setup(t)
  const expired = s.ca.issue('expired', { cn: 'sidecar-expired', notBefore: new Date(Date.now() - 3 * 86400_000), notAfter: new Date(Date.now() - 86400_000) })
  replace(s.certFile, expired.cert)
  replace(s.keyFile, expired.key)
  const h = await sidecar(t, s)
  await until(() => h.app.credential.ready())
  const ready = await send(`${h.adminUrl}/readyz`)
  t.equal(ready.status, 503)
  t.match(JSON.parse(ready.body).reason, /^the certificate in UPSTREAM_TLS_CERT_FILE expired at \d{4}-/)
  const res = await send(`${h.proxyUrl}/x`)
  t.equal(res.status, 502)
  t.equal(JSON.parse(res.body).error, 'upstream_unreachable')
  t.equal(s.upstream.received.length, 0, 'nothing sent')
  t.ok(h.log.lines.some((l) => l.includes('the client certificate cannot be presented')))

  replace(s.keyFile, s.second.key)
  replace(s.certFile, s.second.cert)
  await until(() => h.log.lines.some((l) => l.includes('client certificate renewed')), 4_000)
  t.equal((await send(`${h.adminUrl}/readyz`)).status, 200)
  t.equal((await send(`${h.proxyUrl}/x`)).status, 200)
  t.equal(s.upstream.received.at(-1)!.certificate?.subject, 'sidecar-second')
})

t.test('an upstream that refuses the certificate, or wants one: 502, and the log says which', async (t) => {
  const s = await setup(t, true)
  // Node's TLS server closes the connection without an alert when it refuses
  // a certificate; OpenSSL's (as nginx's and Java's) sends one, which the
  // sidecar reports
  const port = await freePort()
  const openssl = spawn('openssl', ['s_server', '-accept', `127.0.0.1:${port}`, '-Verify', '1', '-verify_return_error', '-CAfile', s.ca.caFile,
    '-cert', join(s.ca.dir, 'server.pem'), '-key', join(s.ca.dir, 'server.key'), '-www', '-quiet'], { stdio: 'ignore' })
  t.teardown(() => { openssl.kill() })
  await until(() => { try { execFileSync('openssl', ['s_client', '-connect', `127.0.0.1:${port}`], { input: '', stdio: 'pipe', timeout: 2_000 }); return true } catch { return false } }, 5_000)
  const other = TestCa.create(join(s.ca.dir, '..', 'other'), 'another CA')
  const stranger = other.issue('stranger', { cn: 'stranger' })
  replace(s.certFile, stranger.cert)
  replace(s.keyFile, stranger.key)
  const h = await sidecar(t, s, { BASE_URL: `https://127.0.0.1:${port}` })
  // a WebSocket handshake first: its refusal is said the same way
  const handshake = await new Promise<number>((resolve, reject) => {
    const ws = new WebSocket(`${h.proxyUrl.replace('http', 'ws')}/stream`)
    ws.once('unexpected-response', (_req, res) => { res.resume(); resolve(res.statusCode ?? 0) })
    ws.once('open', () => reject(new Error('opened')))
    ws.once('error', () => {})
  })
  t.equal(handshake, 502)
  t.ok(h.log.records().some((r) => r.msg === 'the upstream refused the client certificate' && r.certificate === 'CN=stranger' && /ALERT_UNKNOWN_CA/.test(String(r.tlsAlert))), 'the handshake\'s refusal named')
  const refused = await send(`${h.proxyUrl}/x`)
  t.equal(refused.status, 502)
  t.ok(h.log.lines.some((l) => l.includes('the upstream refused the client certificate') && l.includes('CN=stranger') && l.includes('ALERT_UNKNOWN_CA')), h.log.lines.filter((l) => l.includes('upstream')).join('\n'))

  const none = await build(t, { BASE_URL: s.upstream.url, UPSTREAM_TLS_CA_FILE: s.ca.caFile })
  t.equal((await send(`${none.proxyUrl}/x`)).status, 502)
  t.ok(none.log.lines.some((l) => l.includes('the upstream requires a client certificate: set UPSTREAM_TLS_CERT_FILE')), 'says what to set')
})

t.test('each certificate\'s expiry is a metric; the CA file is trusted besides Node\'s own', async (t) => {
  const s = await setup(t)
  const h = await sidecar(t, s)
  const notAfter = new Date(/notAfter=(.*)/.exec(execFileSync('openssl', ['x509', '-noout', '-enddate', '-in', s.certFile], { encoding: 'utf8' }))![1]!).getTime() / 1000
  t.equal(await metric(h.adminUrl, 'auth_sidecar_certificate_expiry_timestamp_seconds{certificate="upstream",route="default"}'), notAfter)
  // a CA bundle larger than a secret: Node's CAs and the test CA
  const bundle = join(s.ca.dir, 'bundle.pem')
  writeFileSync(bundle, [...rootCertificates, readFileSync(s.ca.caFile, 'utf8')].join('\n'))
  const bundled = await sidecar(t, s, { UPSTREAM_TLS_CA_FILE: bundle })
  t.equal((await send(`${bundled.proxyUrl}/x`)).status, 200, 'a CA bundle is read whole')
  // without the CA file the upstream's certificate is not trusted
  const untrusted = await build(t, { BASE_URL: s.upstream.url, UPSTREAM_TLS_CERT_FILE: s.certFile, UPSTREAM_TLS_KEY_FILE: s.keyFile })
  t.equal((await send(`${untrusted.proxyUrl}/x`)).status, 502)
  t.ok(untrusted.log.lines.some((l) => /UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED|UNABLE_TO_GET_ISSUER/.test(l)), 'TLS is verified')
})

t.test('a WebSocket to an HTTPS upstream: the handshake presents the client certificate too', async (t) => {
  const s = await setup(t)
  const server = createHttpsServer({ key: readFileSync(join(s.ca.dir, 'server.key')), cert: readFileSync(join(s.ca.dir, 'server.pem')), ca: readFileSync(s.ca.caFile), requestCert: true, rejectUnauthorized: true })
  const wss = new WebSocketServer({ server })
  const presented: string[] = []
  wss.on('connection', (socket, req) => {
    presented.push(String((req.socket as TLSSocket).getPeerCertificate().subject?.CN))
    socket.on('message', (data) => socket.send(`echo:${String(data)}`))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    for (const c of wss.clients) c.terminate()
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  })
  const h = await sidecar(t, s, { BASE_URL: `https://127.0.0.1:${(server.address() as AddressInfo).port}` })
  const ws = new WebSocket(`${h.proxyUrl.replace('http', 'ws')}/stream`)
  const echoed = await new Promise<string>((resolve, reject) => {
    ws.once('open', () => ws.send('hello'))
    ws.once('message', (d) => resolve(String(d)))
    ws.once('error', reject)
    ws.once('unexpected-response', (_req, res) => reject(new Error(`status ${res.statusCode}`)))
  })
  ws.close()
  t.equal(echoed, 'echo:hello')
  t.same(presented, ['sidecar-first'], 'the upstream verified the certificate before the upgrade')
})

t.test('a renewal that cannot be presented (expired, or not valid yet) never replaces a good pair: said once, naming the file, and taken when its time comes', async (t) => {
  const s = await setup(t)
  const h = await sidecar(t, s)
  t.equal((await send(`${h.proxyUrl}/x`)).status, 200)
  const expired = s.ca.issue('expired', { cn: 'sidecar-expired', notBefore: new Date(Date.now() - 3 * 86400_000), notAfter: new Date(Date.now() - 86400_000) })
  const early = s.ca.issue('early', { cn: 'sidecar-early', notBefore: new Date(Date.now() + 5_000), notAfter: new Date(Date.now() + 86400_000) })
  for (const [what, pair, said] of [['expired', expired, /^the certificate in UPSTREAM_TLS_CERT_FILE expired at \d{4}-\S+: keeping the certificate in use, valid until \d{4}-/], ['not yet valid', early, /^the certificate in UPSTREAM_TLS_CERT_FILE is not valid before \d{4}-\S+: keeping the certificate in use, valid until/]] as const) {
    const told = h.log.records().filter((r) => r.event === 'tls' && r.level === 40).length
    replace(s.keyFile, pair.key)
    replace(s.certFile, pair.cert)
    await until(() => h.log.records().filter((r) => r.event === 'tls' && r.level === 40).length > told, 4_000)
    t.match(h.log.records().filter((r) => r.event === 'tls' && r.level === 40).at(-1)!.reason, said, `${what}: said, naming the file`)
    const statuses = await Promise.all(Array.from({ length: 5 }, async () => (await send(`${h.proxyUrl}/x`)).status))
    t.same(statuses, [200, 200, 200, 200, 200], `${what}: the good pair keeps serving`)
    t.equal(s.upstream.received.at(-1)!.certificate?.subject, 'sidecar-first')
    t.equal((await send(`${h.adminUrl}/readyz`)).status, 200, `${what}: still ready`)
  }
  t.equal(h.log.records().filter((r) => r.event === 'tls' && r.level === 40).length, 2, 'each said once')
  // the not-yet-valid pair, still in the files, is taken once its time comes
  await until(() => h.log.lines.some((l) => l.includes('client certificate renewed')), 8_000)
  t.equal((await send(`${h.proxyUrl}/x`)).status, 200)
  t.equal(s.upstream.received.at(-1)!.certificate?.subject, 'sidecar-early')
})
