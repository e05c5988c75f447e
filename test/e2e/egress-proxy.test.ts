import { createServer } from 'node:http'
import { connect, type AddressInfo } from 'node:net'
import t from 'tap'
import { TokenServer } from '../../src/dev/token-server.js'
import { send } from '../helpers/build.js'
import { spawnSidecar, untilToken } from '../helpers/process.js'
import { FakeUpstream } from '../helpers/upstream.js'


t.test('HTTP_PROXY carries both the token requests and the upstream requests; NO_PROXY bypasses it', async (t) => {
  const tunnels: string[] = []
  const proxy = createServer((_req, res) => { res.writeHead(405).end() })
  proxy.on('connect', (req, client, head) => {
    tunnels.push(req.url ?? '')
    const [host, port] = (req.url ?? '').split(':')
    const target = connect(Number(port), host, () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n')
      target.write(head)
      target.pipe(client)
      client.pipe(target)
    })
    target.on('error', () => client.destroy())
    client.on('error', () => target.destroy())
  })
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve))
  const tokens = new TokenServer({ users: { 'service-user': 'pw' } })
  await tokens.listen()
  const upstream = new FakeUpstream(tokens)
  await upstream.listen()
  t.teardown(async () => {
    proxy.closeAllConnections()
    proxy.close()
    await upstream.close()
    await tokens.close()
  })
  const egressUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`

  const runWith = async (extra: Record<string, string>): Promise<number> => {
    const { run, proxyUrl } = await spawnSidecar(t, upstream.url, tokens.url, 'pw', extra)
    await untilToken(run)
    return (await send(`${proxyUrl}/_verify`)).status
  }

  t.equal(await runWith({ HTTP_PROXY: egressUrl }), 200)
  const hosts = (url: string): string => new URL(url).host
  t.ok(tunnels.includes(hosts(tokens.url)), 'the token request went through the proxy')
  t.ok(tunnels.includes(hosts(upstream.url)), 'the upstream request went through the proxy')

  tunnels.length = 0
  t.equal(await runWith({ http_proxy: egressUrl, NO_PROXY: '127.0.0.1' }), 200)
  t.same(tunnels, [], 'NO_PROXY: straight to both')
})
