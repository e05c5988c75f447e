// A certificate authority made at test time with the openssl CLI, for the
// tests and the real Keycloak they start (scripts/keycloak.mjs): it issues
// client and server certificates with any validity (`openssl ca` takes start
// and end dates, which OpenSSL 3.0's `x509 -req` does not). Nothing is
// committed: every run makes its own keys.
import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

/** `YYYYMMDDHHMMSSZ`, as `openssl ca` takes a date. */
function asn1Time (date) {
  return date.toISOString().replace(/[-:T]/g, '').replace(/\.\d+Z$/, 'Z')
}

export class TestCa {
  /** A new CA in `dir` (its key, certificate and `openssl ca` database). */
  static create (dir, name = 'auth-sidecar test CA') {
    mkdirSync(dir, { recursive: true })
    const ca = new TestCa(dir)
    ca.#openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '3', '-subj', `/CN=${name}`)
    writeFileSync(join(dir, 'index.txt'), '')
    writeFileSync(join(dir, 'ca.cnf'), [
      '[ca]', 'default_ca = test',
      // paths relative to the CA's directory (openssl runs there): `openssl ca`
      // refuses a database path of 250 characters or more
      '[test]', 'dir = .', 'database = $dir/index.txt', 'new_certs_dir = $dir', 'certificate = $dir/ca.pem', 'private_key = $dir/ca.key',
      'default_md = sha256', 'policy = anything', 'unique_subject = no', 'copy_extensions = copy', 'serial = $dir/serial',
      '[anything]', 'commonName = supplied', 'organizationName = optional', ''
    ].join('\n'))
    return ca
  }

  /** The CA another process made in `dir`. */
  static open (dir) {
    if (!existsSync(join(dir, 'ca.cnf'))) throw new Error(`no test CA in ${dir}`)
    return new TestCa(dir)
  }

  constructor (dir) {
    this.dir = dir
    this.caFile = join(dir, 'ca.pem')
  }

  /**
   * A certificate for `name` (files `<name>.pem` and `<name>.key`) signed by
   * this CA. `o.cn` is the subject's CN; `o.san` a subjectAltName
   * (`IP:127.0.0.1,DNS:localhost`); `o.notBefore`, `o.notAfter` its
   * validity (an hour ago, for two days); `o.keyType` `ec` (P-256) or `rsa`.
   */
  issue (name, o) {
    const keyFile = join(this.dir, `${name}.key`)
    const certFile = join(this.dir, `${name}.pem`)
    const key = o.keyType === 'rsa' ? ['-newkey', 'rsa:2048'] : ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256']
    this.#openssl('req', ...key, '-nodes', '-keyout', keyFile, '-out', join(this.dir, `${name}.csr`), '-subj', `/CN=${o.cn}`,
      ...(o.san !== undefined ? ['-addext', `subjectAltName=${o.san}`] : []))
    // a serial of its own for every certificate, whichever process issues it
    const serial = `${Date.now().toString(16)}${Math.floor(Math.random() * 4096).toString(16).padStart(3, '0')}`
    writeFileSync(join(this.dir, 'serial'), serial.length % 2 === 0 ? serial : `0${serial}`)
    const notBefore = o.notBefore ?? new Date(Date.now() - 3600_000)
    const notAfter = o.notAfter ?? new Date(Date.now() + 2 * 86400_000)
    this.#openssl('ca', '-batch', '-config', 'ca.cnf', '-in', `${name}.csr`, '-out', `${name}.pem`, '-notext',
      '-startdate', asn1Time(notBefore), '-enddate', asn1Time(notAfter))
    return { certFile, keyFile, cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8') }
  }

  #openssl (...args) {
    execFileSync('openssl', args, { cwd: this.dir, stdio: 'pipe' })
  }
}
