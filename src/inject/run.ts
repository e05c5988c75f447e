import { parseArgs } from 'node:util'
import { argumentProblem } from '../arguments.js'
import { readInjectConfig } from '../config/inject.js'
import { ConfigError, TlsFileError } from '../errors.js'
import { createLogger } from '../logger.js'
import { VERSION } from '../version.js'
import { ServingCertificate } from './serving-certificate.js'
import { buildWebhook } from './server.js'
import { shutDownOnSignal } from './shutdown.js'
import { injectUsage } from './usage.js'

/**
 * `node dist/main.js inject`: the admission webhook, until SIGTERM. Resolves
 * with the process's exit code: at once for --help or a bad configuration,
 * after the shutdown otherwise.
 */
export async function runInject (env: NodeJS.ProcessEnv, args: string[]): Promise<number> {
  let help: boolean | undefined
  try {
    help = parseArgs({ args, options: { help: { type: 'boolean', short: 'h' } } }).values.help
  } catch (err) {
    process.stderr.write(`auth-sidecar inject: ${argumentProblem(err)}; see inject --help\n`)
    return 2
  }
  if (help === true) {
    process.stdout.write(injectUsage())
    return 0
  }
  let config
  try {
    config = readInjectConfig(env)
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err
    process.stderr.write(`auth-sidecar inject: ${err.message}\n`)
    return 1
  }
  const log = createLogger(config.logLevel)
  let certificate: ServingCertificate
  try {
    certificate = await ServingCertificate.load(config.certFile, config.keyFile, log)
  } catch (err) {
    if (!(err instanceof TlsFileError)) throw err
    process.stderr.write(`auth-sidecar inject: invalid configuration: ${err.message}\n`)
    return 1
  }
  const webhook = buildWebhook({ image: config.image, tls: certificate.pem, log })
  const closed = shutDownOnSignal({
    delayMs: config.shutdownDelayMs,
    log,
    stopping: () => { webhook.stopping() },
    close: async () => {
      certificate.close()
      await webhook.app.close()
    }
  })
  try {
    await webhook.app.listen({ host: config.host, port: config.port })
  } catch (err) {
    log.flush()
    process.stderr.write(`auth-sidecar inject: cannot listen on INJECT_HOST ${config.host} INJECT_PORT ${config.port}: ${(err as Error).message}\n`)
    return 1
  }
  certificate.watch((pem) => { webhook.app.server.setSecureContext(pem) })
  const address = webhook.app.server.address()
  const c = certificate.certificate
  log.info({
    version: VERSION,
    listen: typeof address === 'object' && address !== null ? `${address.address}:${address.port}` : String(address),
    image: config.image,
    certificate: { subject: c.subject, notAfter: c.notAfter.toISOString(), thumbprint: c.thumbprint }
  }, 'auth-sidecar inject listening')
  return await closed
}
