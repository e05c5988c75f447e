import { createServer } from 'node:https'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { TokenServer } from '../../dev/token-server.js'
import { send } from '../helpers/build.js'
import { spawnSidecar, untilToken } from '../helpers/process.js'
import { makeCa } from '../helpers/tls.js'

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
