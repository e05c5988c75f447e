/**
 * `npm run demo`: the sidecar against a built-in development token server
 * and an echo upstream, with no configuration at all. Tokens live 30 s, so
 * renewals show in the log within a minute. A second route, /reports, gets
 * its token by token exchange, for the audience reports-api.
 */
import type { AddressInfo } from 'node:net'
import { buildApp } from '../src/app.js'
import { loadConfig } from '../src/config/load.js'
import { ListenError } from '../src/errors.js'
import { createLogger } from '../src/logger.js'
import { createEchoUpstream } from './echo-upstream.js'
import { TokenServer } from './token-server.js'

const tokenServer = new TokenServer({ accessTokenSeconds: 30, refreshTokenSeconds: 120, exchange: { 'legacy-app': ['reports-api'] } })
await tokenServer.listen()
const upstream = createEchoUpstream(tokenServer)
await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
const upstreamPort = (upstream.address() as AddressInfo).port

// The demo's own settings; PROXY_PORT, ADMIN_PORT and LOG_LEVEL may still be set.
const config = loadConfig({
  BASE_URL: `http://127.0.0.1:${upstreamPort}/api`,
  AUTH_URL: tokenServer.url,
  AUTH_CLIENT_ID: 'legacy-app',
  AUTH_USERNAME: 'service-user',
  AUTH_PASSWORD: 'service-password',
  ROUTE_REPORTS_BASE_URL: `http://127.0.0.1:${upstreamPort}/reports-api`,
  ROUTE_REPORTS_PATH: '/reports',
  ROUTE_REPORTS_AUTH_EXCHANGE_AUDIENCE: 'reports-api',
  PROXY_PORT: process.env.PROXY_PORT ?? '8080',
  ADMIN_PORT: process.env.ADMIN_PORT ?? '9090',
  ADMIN_HOST: '127.0.0.1',
  LOG_LEVEL: process.env.LOG_LEVEL ?? 'info'
}, { cwd: new URL('.', import.meta.url).pathname })
const logger = createLogger(config.logLevel)
const app = await buildApp(config, { logger })
let addresses: Awaited<ReturnType<typeof app.listen>>
try {
  addresses = await app.listen()
} catch (err) {
  if (!(err instanceof ListenError)) throw err
  process.stderr.write(`auth-sidecar demo: ${err.message}, for example: PROXY_PORT=18080 ADMIN_PORT=19090 npm run demo\n`)
  process.exit(1)
}
const { proxy, admin } = addresses

const stop = async (): Promise<void> => {
  await app.close(1_000)
  upstream.closeAllConnections()
  upstream.close()
  await tokenServer.close()
  process.exit(0)
}
process.once('SIGINT', () => { void stop() })
process.once('SIGTERM', () => { void stop() })

process.stderr.write(`
auth-sidecar demo
  token server   ${tokenServer.tokenUrl}  (tokens live ${tokenServer.accessTokenSeconds} s)
  echo upstream  http://127.0.0.1:${upstreamPort}/api  (answers 401 without a valid token)
  proxy          http://${proxy.address}:${proxy.port}
  admin          http://${admin.address}:${admin.port}/readyz  /metrics

Try:
  curl -s 'http://127.0.0.1:${proxy.port}/hello?name=world'
  curl -s 'http://127.0.0.1:${proxy.port}/reports/daily'     (a token exchanged for reports-api)
Readable logs: npm run demo | npx pino-pretty
Stop with Ctrl-C.

`)
