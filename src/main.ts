import { parseArgs } from 'node:util'
import closeWithGrace from 'close-with-grace'
import { buildApp } from './app.js'
import { argumentProblem } from './arguments.js'
import { defaultRouteOf, readConfiguration, type Config } from './config/load.js'
import { ConfigError, ListenError, TlsFileError } from './errors.js'
import { createLogger } from './logger.js'
import { runCheck } from './check/run.js'
import { ConfigReloader } from './reload.js'
import { flushBudgetMs, startTracing } from './tracing/tracing.js'
import { usage } from './usage.js'
import { VERSION } from './version.js'

const args = process.argv.slice(2)
if (args[0] === 'inject') {
  // the admission webhook: loaded only for this command, never by the sidecar
  const { runInject } = await import('./inject/run.js')
  process.exit(await runInject(process.env, args.slice(1)))
}
if (args[0] === 'check') {
  const code = await runCheck(process.env, args.slice(1), (text) => process.stdout.write(text))
  process.exit(code)
}
let flags: { help?: boolean, version?: boolean }
try {
  flags = parseArgs({ args, options: { help: { type: 'boolean', short: 'h' }, version: { type: 'boolean', short: 'v' } } }).values
} catch (err) {
  process.stderr.write(`auth-sidecar: ${argumentProblem(err)}; see --help\n`)
  process.exit(2)
}
if (flags.help === true) {
  process.stdout.write(usage())
  process.exit(0)
}
if (flags.version === true) {
  process.stdout.write(`${VERSION}\n`)
  process.exit(0)
}

let config: Config
try {
  config = await readConfiguration(process.env)
} catch (err) {
  if (!(err instanceof ConfigError)) throw err
  process.stderr.write(`auth-sidecar: ${err.message}\n`)
  process.exit(1)
}

// SIGHUP reloads the configuration; until the sidecar is built there is nothing to reload, and it must not end the process
let reloading: ConfigReloader<Config> | undefined
process.on('SIGHUP', () => { void reloading?.reload('SIGHUP') })

const logger = createLogger(config.logLevel)
for (const warning of config.warnings) logger.warn({ event: 'config' }, warning)
// off unless OTEL_TRACES_EXPORTER names an exporter: the SDK is then loaded, and only then
const tracing = await startTracing(config.tracing)
let app: Awaited<ReturnType<typeof buildApp>>
try {
  app = await buildApp(config, { logger, tracing })
} catch (err) {
  // a TLS file that changed into something unusable between the check and its use
  if (!(err instanceof TlsFileError)) throw err
  process.stderr.write(`auth-sidecar: invalid configuration: ${err.message}\n`)
  process.exit(1)
}

// Node opens its inspector on SIGUSR1, reachable from every container of
// the pod: the sidecar opens no debugger on a signal.
process.on('SIGUSR1', () => { logger.warn({ signal: 'SIGUSR1' }, 'SIGUSR1 ignored: no debugger is opened on a signal') })

// CONFIG_FILE's changes, and SIGHUP, apply a new version of the configuration
const reloader = new ConfigReloader({
  config,
  read: async () => await readConfiguration(process.env),
  apply: async (next) => await app.apply(next),
  count: (outcome) => app.metrics.countReload(outcome),
  log: logger
})
reloading = reloader

// app.close() cuts what is in progress at the end of the grace period and
// ends the session within TOKEN_TIMEOUT_MS; tracing's last export gets a
// budget that ends before this backstop, which is only for something that
// hangs nonetheless.
const backstopMs = config.shutdownGraceMs + config.token.timeoutMs + 2_000
closeWithGrace({
  delay: backstopMs,
  // SIGHUP reloads the configuration
  skip: ['SIGHUP'],
  logger: { error: (msg: unknown) => logger.error({ detail: String(msg) }, 'shutdown') }
}, async ({ signal, err }) => {
  const signalled = performance.now()
  if (err !== undefined) logger.error({ err }, 'unexpected error: shutting down')
  else logger.info({ signal, graceMs: config.shutdownGraceMs }, 'shutting down: finishing in-flight requests')
  reloader.close()
  await app.close()
  // the spans of the last requests and of the session's end, within the shutdown's budget
  const withinMs = Math.round(flushBudgetMs(config.shutdownGraceMs, backstopMs, performance.now() - signalled))
  if (!await tracing.shutdown(withinMs)) logger.warn({ withinMs }, 'tracing: the exporter did not finish sending the last spans in time; they are dropped')
  logger.info({}, 'stopped')
  logger.flush()
})

try {
  const { proxy, admin, routes, forward } = await app.listen()
  // the start line describes the default route at the top level, the named ones under `routes`
  const byDefault = defaultRouteOf(config)
  const auth = byDefault.credential.auth
  logger.info({
    version: VERSION,
    proxy: `${proxy.address}:${proxy.port}`,
    admin: `${admin.address}:${admin.port}`,
    ...(forward !== undefined && { forwardProxy: `${forward.address}:${forward.port}` }),
    upstream: byDefault.origin + byDefault.basePath,
    ...(config.routes.length > 1 && {
      routes: Object.fromEntries(config.routes.slice(1).map((r) => [r.name, {
        upstream: r.origin + r.basePath,
        ...(r.port === undefined ? { path: r.path } : { listen: `${routes[r.name]!.address}:${routes[r.name]!.port}` })
      }]))
    }),
    ...(config.tracing !== undefined && { tracing: config.tracing.exporter }),
    ...(config.file !== undefined && { configFile: config.file.path, ...(config.file.overridden.length > 0 && { overriddenByEnvironment: config.file.overridden }) }),
    authMode: auth.mode,
    ...(auth.mode === 'oauth2' && {
      grantType: auth.grantType,
      ...(auth.tokenUrl !== undefined && { tokenUrl: auth.tokenUrl }),
      ...(auth.issuerUrl !== undefined && { issuerUrl: auth.issuerUrl }),
      clientId: auth.clientId
    })
  }, 'auth-sidecar listening')
  reloader.watch()
} catch (err) {
  // one readable line, like a configuration error: which variable, which address
  const message = err instanceof ListenError ? err.message : `cannot listen: ${(err as Error).message}`
  logger.flush()
  process.stderr.write(`auth-sidecar: ${message}\n`)
  process.exit(1)
}
