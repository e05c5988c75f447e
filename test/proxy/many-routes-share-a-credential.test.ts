import t from 'tap'
import { build, send } from '../helpers/build.js'

t.test('a dozen routes sharing one credential are served without a listener-leak warning', async (t) => {
  const warnings: string[] = []
  const onWarning = (warning: Error): void => { warnings.push(`${warning.name}: ${warning.message}`) }
  process.on('warning', onWarning)
  t.teardown(() => { process.off('warning', onWarning) })
  const routes = Object.fromEntries(Array.from({ length: 12 }, (_, i) => [
    [`ROUTE_R${i}_BASE_URL`, `http://127.0.0.1:9/r${i}`],
    [`ROUTE_R${i}_PATH`, `/r${i}`]
  ]).flat())
  const h = await build(t, routes)
  for (const i of [0, 11]) t.equal((await send(`${h.proxyUrl}/r${i}/ping`)).status, 502, `route r${i} is served (its upstream refuses)`)
  // Node says it on the next turn of the loop
  await new Promise((resolve) => setImmediate(resolve))
  t.same(warnings.filter((w) => w.startsWith('MaxListenersExceededWarning')), [])
})
