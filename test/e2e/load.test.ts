import autocannon from 'autocannon'
import t from 'tap'
import { startSidecar } from '../helpers/process.js'

/** Length of the load run; LOAD_SECONDS=60 for the full minute. */
const LOAD_SECONDS = Number(process.env.LOAD_SECONDS ?? 15)

t.test(`64 connections for ${LOAD_SECONDS} s with 3-second tokens: all 2xx, no invalid token, one grant at a time`, async (t) => {
  const s = await startSidecar(t, {}, { accessTokenSeconds: 3, refreshTokenSeconds: 10, sessionMaxSeconds: 7 })
  const result = await autocannon({
    url: `${s.proxyUrl}/_verify/load`,
    connections: 64,
    duration: LOAD_SECONDS
  })
  const invalid = s.upstream.received.filter((r) => !r.tokenValid).length
  t.ok(result.requests.total > 1000, `${result.requests.total} requests, ${Math.round(result.requests.average)} req/s`)
  t.equal(result.non2xx, 0, 'no non-2xx response')
  t.equal(result.errors, 0, 'no connection error')
  t.equal(result.timeouts, 0, 'no timeout')
  t.equal(invalid, 0, 'no invalid token reached the upstream')
  t.equal(s.tokenServer.maxConcurrent, 1, 'never more than one grant in flight')
  const grants = s.tokenServer.grants.map((g) => g.grantType)
  t.ok(grants.length >= LOAD_SECONDS / 1.5, `${grants.length} grants (${grants.filter((g) => g === 'refresh_token').length} refresh)`)
})
