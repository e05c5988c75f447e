import t, { type Test } from 'tap'
import { build, send, until } from '../helpers/build.js'
import type { Harness } from '../helpers/build.js'

// How long the sidecar keeps an idle pooled upstream connection: what the
// upstream announces (`Keep-Alive: timeout=N`, honoured less undici's 2 s, up
// to 60 s), else UPSTREAM_KEEPALIVE_MS (src/app.ts).

/** Connections the upstream has accepted so far. */
function countConnections (h: Harness): () => number {
  let n = 0
  h.upstream.server.on('connection', () => { n++ })
  return () => n
}

async function twoRequestsApart (t: Test, h: Harness, ms: number): Promise<void> {
  t.equal((await send(`${h.proxyUrl}/first`)).status, 200)
  await new Promise((resolve) => setTimeout(resolve, ms))
  t.equal((await send(`${h.proxyUrl}/second`)).status, 200)
}

t.test('an upstream that announces its keep-alive keeps its connection through a lull longer than UPSTREAM_KEEPALIVE_MS', async (t) => {
  const h = await build(t, { UPSTREAM_KEEPALIVE_MS: '300' })
  await until(() => h.app.tokens.ready())
  h.upstream.server.keepAliveTimeout = 20_000 // Node announces `Keep-Alive: timeout=20`
  const connections = countConnections(h)
  await twoRequestsApart(t, h, 1_200)
  t.equal(connections(), 1, 'the second request went on the first one\'s connection')
})

t.test('an upstream that announces nothing: the connection goes after UPSTREAM_KEEPALIVE_MS', async (t) => {
  const h = await build(t, { UPSTREAM_KEEPALIVE_MS: '300' })
  await until(() => h.app.tokens.ready())
  h.upstream.server.keepAliveTimeout = 0 // no Keep-Alive header, and the upstream itself never closes
  const connections = countConnections(h)
  await twoRequestsApart(t, h, 1_200)
  t.equal(connections(), 2, 'the idle connection was closed by the sidecar, a new one opened')
})

t.test('an announced keep-alive shorter than UPSTREAM_KEEPALIVE_MS wins: the sidecar closes first, never the upstream under a request', async (t) => {
  const h = await build(t, { UPSTREAM_KEEPALIVE_MS: '60000' })
  await until(() => h.app.tokens.ready())
  h.upstream.server.keepAliveTimeout = 3_000 // announced 3 s: undici keeps it 1 s
  const connections = countConnections(h)
  await twoRequestsApart(t, h, 1_500)
  t.equal(connections(), 2)
})
