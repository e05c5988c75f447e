import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createServer } from 'node:https'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import { TokenServer } from '../../dev/token-server.js'
import { send } from '../helpers/build.js'
import { spawnSidecar, untilToken } from '../helpers/process.js'

/** An HTTPS upstream with a certificate from a CA of the test's own. */
function makeCa (dir: string): { ca: string, key: string, cert: string } {
  const run = (...args: string[]): void => { execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' }) }
  run('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=auth-sidecar test CA')
  run('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=127.0.0.1')
  execFileSync('sh', ['-c', 'printf "subjectAltName=IP:127.0.0.1" > ext.cnf'], { cwd: dir })
  run('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.pem', '-days', '2', '-extfile', 'ext.cnf')
  return { ca: join(dir, 'ca.pem'), key: readFileSync(join(dir, 'server.key'), 'utf8'), cert: readFileSync(join(dir, 'server.pem'), 'utf8') }
}

t.test('TLS to the upstream is verified; NODE_EXTRA_CA_CERTS adds a CA', async (t) => {
  const dir = t.testdir({})
  const { ca, key, cert } = makeCa(dir)
  const seen: string[] = []
  const upstream = createServer({ key, cert }, (req, res) => {
    seen.push(req.headers.authorization ?? '')
    res.end('secure hello')
  })
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
  const tokens = new TokenServer({ users: { 'service-user': 'pw' } })
  await tokens.listen()
  t.teardown(async () => {
    upstream.closeAllConnections()
    upstream.close()
    await tokens.close()
  })
  const baseUrl = `https://127.0.0.1:${(upstream.address() as AddressInfo).port}`

  const runWith = async (extra: Record<string, string>): Promise<number> => {
    const { run, proxyUrl } = await spawnSidecar(t, baseUrl, tokens.url, 'pw', extra)
    await untilToken(run)
    return (await send(`${proxyUrl}/x`)).status
  }

  t.equal(await runWith({}), 502, 'an unknown CA is refused: 502, nothing sent')
  t.equal(seen.length, 0)
  t.equal(await runWith({ NODE_EXTRA_CA_CERTS: ca }), 200, 'with the CA added, the request goes through')
  t.equal(seen.length, 1)
  t.match(seen[0], /^Bearer /)
})
