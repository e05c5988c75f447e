import { X509Certificate } from 'node:crypto'
import { copyFileSync, writeFileSync } from 'node:fs'
import t from 'tap'
import { httpsRequest } from '../helpers/admission.js'
import { until } from '../helpers/build.js'
import { logLine, startInjector } from '../helpers/injector.js'

/**
 * The serving certificate renewed in place, as cert-manager renews the
 * Secret: a new TLS connection is shown the new certificate, without a
 * restart; a half-written renewal keeps the one in use.
 */
const fingerprint = (pem: string): string => new X509Certificate(pem).fingerprint256

t.test('renewed files: new connections get the new certificate, with no restart', async (t) => {
  const injector = await startInjector(t)
  const { url, ca, caAuthority, serving, run } = injector
  t.equal((await httpsRequest(`${url}/healthz`, ca)).peerCertificate, fingerprint(serving.cert), 'the first certificate')

  const renewed = caAuthority.issue('renewed', { cn: 'auth-sidecar-injector.auth-sidecar.svc', san: 'IP:127.0.0.1,DNS:localhost' })
  const seen = run.stdout.length
  copyFileSync(renewed.keyFile, serving.keyFile)
  copyFileSync(renewed.certFile, serving.certFile)
  const line = await logLine(run, 'serving certificate renewed', 15_000, seen)
  t.equal(line.thumbprint !== undefined, true)
  const after = await httpsRequest(`${url}/healthz`, ca)
  t.equal(after.status, 200)
  t.equal(after.peerCertificate, fingerprint(renewed.cert), 'a new connection is shown the renewed certificate')
  t.equal(run.child.exitCode, null, 'the same process')
})

t.test('a certificate whose key is not its own is refused: the one in use stays', async (t) => {
  const { url, ca, caAuthority, serving, run } = await startInjector(t)
  const other = caAuthority.issue('other', { cn: 'other', san: 'IP:127.0.0.1' })
  const seen = run.stdout.length
  writeFileSync(serving.certFile, other.cert)
  const warning = await logLine(run, 'the serving certificate\'s files changed but cannot be used', 15_000, seen)
  t.match(warning.reason, /INJECT_TLS_KEY_FILE holds a key that is not the one of the certificate in INJECT_TLS_CERT_FILE/)
  t.notOk(JSON.stringify(warning).includes('PRIVATE KEY'), 'no key material in the log')
  t.equal((await httpsRequest(`${url}/healthz`, ca)).peerCertificate, fingerprint(serving.cert), 'still the good pair')
})

t.test('an expired renewal never replaces a valid certificate', async (t) => {
  const { url, ca, caAuthority, serving, run } = await startInjector(t)
  const expired = caAuthority.issue('expired', { cn: 'old', san: 'IP:127.0.0.1', notBefore: new Date(Date.now() - 2 * 86400_000), notAfter: new Date(Date.now() - 86400_000) })
  const seen = run.stdout.length
  copyFileSync(expired.keyFile, serving.keyFile)
  copyFileSync(expired.certFile, serving.certFile)
  // the key may be seen changed before its certificate: the verdict on the whole pair is the one that says expired
  await until(() => run.stdout.slice(seen).some((l) => l.includes('cannot be used') && l.includes('expired at')), 15_000)
  t.notOk(run.stdout.slice(seen).some((l) => l.includes('serving certificate renewed')), 'not put in')
  t.equal((await httpsRequest(`${url}/healthz`, ca)).peerCertificate, fingerprint(serving.cert), 'still the valid one')
})
