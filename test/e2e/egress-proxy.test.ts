import { createServer as createHttpsServer } from 'node:https'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { TokenServer } from '../../dev/token-server.js'
import { send, until } from '../helpers/build.js'
import { connectProxy } from '../helpers/connect-proxy.js'
import { spawnSidecar, untilToken } from '../helpers/process.js'
import { makeCa } from '../helpers/tls.js'
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

t.test('HTTPS_PROXY with credentials carries HTTPS token requests and upstream requests, TLS verified inside the tunnel; the proxy\'s password is never logged', async (t) => {
  const dir = t.testdir({})
  const { ca, key, cert } = makeCa(dir)
  const credentials = { username: 'egress-user', password: 's3cret-Proxy-pass' }
  const proxy = await connectProxy(t, () => false, credentials)
  const tokens = new TokenServer({ users: { 'service-user': 'pw' }, tls: { key, cert } })
  await tokens.listen()
  const seen: string[] = []
  const upstream = createHttpsServer({ key, cert }, (req, res) => {
    seen.push(req.headers.authorization ?? '')
    res.end(tokens.verify(req.headers.authorization).ok ? 'valid token' : 'invalid token')
  })
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    upstream.closeAllConnections()
    upstream.close()
    await tokens.close()
  })
  const upstreamUrl = `https://127.0.0.1:${(upstream.address() as AddressInfo).port}`
  const egress = `http://${credentials.username}:${encodeURIComponent(credentials.password)}@${new URL(proxy.url).host}`

  // without the CA the TLS check inside the tunnel refuses the token endpoint
  const refused = await spawnSidecar(t, upstreamUrl, tokens.url, 'pw', { HTTPS_PROXY: egress, LOG_LEVEL: 'debug' })
  await until(() => refused.run.stdout.some((l) => l.includes('token request failed')), 10_000)
  t.match(refused.run.stdout.find((l) => l.includes('token request failed')), /UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED|unable to verify/i)
  t.equal(tokens.grants.length, 0, 'no grant reached the token endpoint')
  t.ok(proxy.tunnels.includes(new URL(tokens.url).host), 'it went through the proxy')

  const { run, proxyUrl } = await spawnSidecar(t, upstreamUrl, tokens.url, 'pw', { HTTPS_PROXY: egress, NODE_EXTRA_CA_CERTS: ca, LOG_LEVEL: 'debug' })
  await untilToken(run)
  const answer = await send(`${proxyUrl}/x`)
  t.equal(answer.status, 200)
  t.equal(answer.body, 'valid token')
  t.ok(proxy.tunnels.includes(new URL(upstreamUrl).host), 'the upstream request went through the proxy')
  t.equal(tokens.grants.length, 1)

  const output = [...refused.run.stdout, ...refused.run.stderr, ...run.stdout, ...run.stderr].join('\n')
  for (const secret of [credentials.password, encodeURIComponent(credentials.password), Buffer.from(`${credentials.username}:${credentials.password}`).toString('base64')]) {
    t.notOk(output.includes(secret), 'the proxy\'s password is in no log line, raw, encoded or in its header')
  }
})
