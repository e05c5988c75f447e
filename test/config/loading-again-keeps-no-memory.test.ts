import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'

setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void

t.test('a configuration read again and again (each reload) keeps nothing of the versions before, a route with its own credential included', async (t) => {
  const env = {
    BASE_URL: 'http://127.0.0.1:9/api',
    AUTH_TOKEN_URL: 'http://127.0.0.1:9/token',
    AUTH_CLIENT_ID: 'legacy-app',
    AUTH_USERNAME: 'svc',
    AUTH_PASSWORD: 'pw',
    ROUTE_BILLING_BASE_URL: 'http://127.0.0.1:9/billing',
    ROUTE_BILLING_PATH: '/billing',
    ROUTE_BILLING_AUTH_CLIENT_ID: 'billing-app'
  }
  loadConfig(env, { cwd: '/nonexistent' })
  gc()
  const before = process.memoryUsage().heapUsed
  const loads = 300
  for (let i = 0; i < loads; i++) loadConfig(env, { cwd: '/nonexistent' })
  gc()
  const perLoad = (process.memoryUsage().heapUsed - before) / loads
  // each version's schema compiled and kept was some 60 KB
  t.ok(perLoad < 16 * 1024, `${(perLoad / 1024).toFixed(1)} KB kept per load`)
})
