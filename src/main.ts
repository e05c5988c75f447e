import closeWithGrace from 'close-with-grace'
import { buildApp } from './app.js'
import { ConfigError, loadConfig, type Config } from './config/load.js'
import { createLogger } from './logger.js'

let config: Config
try {
  config = loadConfig(process.env)
} catch (err) {
  if (!(err instanceof ConfigError)) throw err
  process.stderr.write(`auth-sidecar: ${err.message}\n`)
  process.exit(1)
}

const logger = createLogger(config.logLevel)
const app = await buildApp(config, { logger })

closeWithGrace({
  // app.close() cuts the remaining connections after the grace period;
  // this is only the backstop should something hang after that.
  delay: config.shutdownGraceMs + 5_000,
  logger: { error: (msg: unknown) => logger.error({ detail: String(msg) }, 'shutdown') }
}, async ({ signal, err }) => {
  if (err !== undefined) logger.error({ err }, 'unexpected error: shutting down')
  else logger.info({ signal, graceMs: config.shutdownGraceMs }, 'shutting down: finishing in-flight requests')
  await app.close()
  logger.info({}, 'stopped')
  logger.flush()
})

try {
  const { proxy, admin } = await app.listen()
  logger.info({
    proxy: `${proxy.address}:${proxy.port}`,
    admin: `${admin.address}:${admin.port}`,
    upstream: config.upstream.origin + config.upstream.basePath,
    authMode: config.auth.mode,
    ...(config.auth.mode === 'oauth2' && { tokenUrl: config.auth.tokenUrl, clientId: config.auth.clientId })
  }, 'auth-sidecar listening')
} catch (err) {
  logger.fatal({ err }, 'cannot listen')
  logger.flush()
  process.exit(1)
}
