import t from 'tap'
import { TokenServer } from '../../dev/token-server.js'
import { send } from '../helpers/build.js'
import { connectProxy } from '../helpers/connect-proxy.js'
import { spawnSidecar, untilToken } from '../helpers/process.js'
import { FakeUpstream } from '../helpers/upstream.js'


t.test('HTTP_PROXY carries both the token requests and the upstream requests; NO_PROXY bypasses it', async (t) => {
  const proxy = await connectProxy(t)
  const tunnels = proxy.tunnels
  const tokens = new TokenServer({ users: { 'service-user': 'pw' } })
  await tokens.listen()
  const upstream = new FakeUpstream(tokens)
  await upstream.listen()
  t.teardown(async () => {
    await upstream.close()
    await tokens.close()
  })
  const egressUrl = proxy.url

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
