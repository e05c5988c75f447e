import t, { type Test } from 'tap'
import { build, send, until } from '../helpers/build.js'

// How long the sidecar keeps an idle pooled upstream connection: what the
// upstream announces (`Keep-Alive: timeout=N`, honoured less undici's 2 s, up
// to 60 s), else UPSTREAM_KEEPALIVE_MS (src/app.ts).

/**
 * A sidecar with UPSTREAM_KEEPALIVE_MS=`sidecarMs` in front of an upstream
 * whose own keep-alive is `upstreamMs` (Node announces it as `Keep-Alive:
 * timeout=N`; 0 announces nothing and never closes): two requests `apartMs`
 * apart, then how many connections the upstream accepted.
 */
async function connectionsForTwoRequests (t: Test, sidecarMs: number, upstreamMs: number, apartMs: number): Promise<number> {
  const h = await build(t, { UPSTREAM_KEEPALIVE_MS: String(sidecarMs) })
  await until(() => h.app.credential.ready())
  h.upstream.server.keepAliveTimeout = upstreamMs
  let connections = 0
  h.upstream.server.on('connection', () => { connections++ })
  t.equal((await send(`${h.proxyUrl}/first`)).status, 200)
  await new Promise((resolve) => setTimeout(resolve, apartMs))
  t.equal((await send(`${h.proxyUrl}/second`)).status, 200)
  return connections
}

t.test('an upstream that announces its keep-alive keeps its connection through a lull longer than UPSTREAM_KEEPALIVE_MS', async (t) => {
  t.equal(await connectionsForTwoRequests(t, 300, 20_000, 1_200), 1, 'the second request went on the first one\'s connection')
})

t.test('an upstream that announces nothing: the connection goes after UPSTREAM_KEEPALIVE_MS', async (t) => {
  t.equal(await connectionsForTwoRequests(t, 300, 0, 1_200), 2, 'the idle connection was closed by the sidecar, a new one opened')
})

t.test('an announced keep-alive shorter than UPSTREAM_KEEPALIVE_MS wins: the sidecar closes the idle connection before the upstream would', async (t) => {
  // announced 3 s: undici keeps it 1 s; the upstream would close it at 3 s
  t.equal(await connectionsForTwoRequests(t, 60_000, 3_000, 1_500), 2)
})
