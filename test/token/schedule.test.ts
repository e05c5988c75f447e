import t from 'tap'
import { backoffDelay, renewalDelay, slowRetryDelay, usableFor } from '../../src/token/schedule.js'

t.test('renewal falls between 50% and 75% of realistic lifetimes, jittered', async (t) => {
  for (const seconds of [10, 60, 300, 3600, 86_400]) {
    const ms = seconds * 1000
    const early = renewalDelay(ms, 0)
    const late = renewalDelay(ms, 0.999999)
    t.equal(early, ms * 0.5, `${seconds} s: earliest at half`)
    t.ok(late <= ms * 0.75 && late > ms * 0.7, `${seconds} s: latest at 75%`)
    t.ok(renewalDelay(ms, 0.5) > early && renewalDelay(ms, 0.5) < late, 'jitter spreads a fleet')
    t.ok(late < usableFor(ms), 'planned before the token stops being handed out')
  }
})

t.test('short lifetimes: renewal never before half, never a busy loop', async (t) => {
  for (const ms of [1000, 2000, 3000]) {
    for (const r of [0, 0.5, 0.99]) {
      const d = renewalDelay(ms, r)
      t.ok(d >= ms / 2, `${ms} ms, r=${r}: ${d} ms`)
      t.ok(d <= usableFor(ms))
    }
  }
})

t.test('a token is handed out until 10% + 1 s before expiry (at most 5 s, never less than half)', async (t) => {
  t.equal(usableFor(300_000), 295_000)
  t.equal(usableFor(20_000), 17_000)
  t.equal(usableFor(3_000), 1_700)
  t.equal(usableFor(1_000), 500)
})

t.test('backoff doubles from min to max with jitter in [half, all], and honours a longer Retry-After', async (t) => {
  const policy = { minMs: 1000, maxMs: 30_000 }
  t.same([0, 1, 2, 3, 4, 5, 6, 40].map((a) => backoffDelay(policy, a, 1)), [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000])
  t.equal(backoffDelay(policy, 3, 0), 4000)
  t.equal(backoffDelay(policy, 0, 1, 20_000), 20_000)
  t.equal(backoffDelay(policy, 0, 1, 10 * 86_400_000), 300_000, 'an absurd Retry-After is capped')
  t.equal(slowRetryDelay(60_000, 0), 54_000)
  t.equal(slowRetryDelay(60_000, 1), 66_000)
})
