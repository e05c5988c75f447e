import t from 'tap'
import type { ConfigError } from '../../src/errors.js'
import { readInjectConfig } from '../../src/config/inject.js'
import { start } from '../helpers/process.js'

/** The inject command's variables: defaults, and every problem named at once; the built command exits 1 on them. */
const GOOD = { INJECT_TLS_CERT_FILE: '/tls/tls.crt', INJECT_TLS_KEY_FILE: '/tls/tls.key', INJECT_IMAGE: 'ghcr.io/auth-sidecar/auth-sidecar:0.1.0' }

t.test('defaults: 0.0.0.0:8443, a 5 s delay before the close, info', async (t) => {
  t.same(readInjectConfig(GOOD, '/'), { host: '0.0.0.0', port: 8443, certFile: '/tls/tls.crt', keyFile: '/tls/tls.key', image: GOOD.INJECT_IMAGE, shutdownDelayMs: 5000, logLevel: 'info' })
  t.match(readInjectConfig({ ...GOOD, INJECT_HOST: '::', INJECT_PORT: '9443' }, '/'), { host: '::', port: 9443 })
  t.match(readInjectConfig({ ...GOOD, INJECT_SHUTDOWN_DELAY_MS: '0' }, '/'), { shutdownDelayMs: 0 }, '0: no delay')
  t.match(readInjectConfig({ ...GOOD, INJECT_SHUTDOWN_DELAY_MS: '60000' }, '/'), { shutdownDelayMs: 60000 }, 'the most')
})

/** The problems readInjectConfig throws for `env`. */
function problemsOf (env: NodeJS.ProcessEnv): readonly string[] {
  try {
    readInjectConfig(env)
  } catch (err) {
    return (err as ConfigError).problems
  }
  throw new Error('no ConfigError')
}

t.test('every problem at once, each naming its variable', async (t) => {
  t.same(problemsOf({}), [
    'INJECT_TLS_CERT_FILE is required: the webhook\'s serving certificate (PEM); the API server calls it over HTTPS only',
    'INJECT_TLS_KEY_FILE is required: the serving certificate\'s private key (PEM)',
    'INJECT_IMAGE is required: the auth-sidecar image to inject'
  ])
  t.same(problemsOf({ ...GOOD, INJECT_PORT: '70000', INJECT_IMAGE: 'not an image', INJECT_SHUTDOWN_DELAY_MS: '60001', LOG_LEVEL: 'loud' }),
    ['INJECT_PORT must be a port number (0 to 65535)', 'INJECT_IMAGE must be an image reference (registry/name:tag or @digest)', 'INJECT_SHUTDOWN_DELAY_MS must be a whole number of milliseconds from 0 to 60000', 'LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent'])
  for (const bad of ['-1', '1.5', '5s', '1e3']) {
    t.same(problemsOf({ ...GOOD, INJECT_SHUTDOWN_DELAY_MS: bad }), ['INJECT_SHUTDOWN_DELAY_MS must be a whole number of milliseconds from 0 to 60000'], `INJECT_SHUTDOWN_DELAY_MS=${bad}`)
  }
})

t.test('the built command: a missing variable or an unreadable certificate exits 1 with one line; --help exits 0', async (t) => {
  const missing = start({}, undefined, ['inject'])
  t.equal(await missing.exited, 1)
  t.match(missing.stderr.join(''), /^auth-sidecar inject: invalid configuration: INJECT_TLS_CERT_FILE is required/)
  const unreadable = start({ ...GOOD, INJECT_TLS_CERT_FILE: '/nonexistent/tls.crt' }, undefined, ['inject'])
  t.equal(await unreadable.exited, 1)
  t.match(unreadable.stderr.join(''), /INJECT_TLS_CERT_FILE cannot be read \(ENOENT\)/)
  const help = start({}, undefined, ['inject', '--help'])
  t.equal(await help.exited, 0)
  t.match(help.stdout.join('\n'), /INJECT_TLS_CERT_FILE/)
  t.match(help.stdout.join('\n'), /INJECT_SHUTDOWN_DELAY_MS +after SIGTERM, .*\(default 5000\)/)
  const sidecarHelp = start({}, undefined, ['--help'])
  t.equal(await sidecarHelp.exited, 0)
  t.match(sidecarHelp.stdout.join('\n'), /node dist\/main\.js inject/, 'the sidecar\'s --help lists the command')
})

t.test('the sidecar\'s bundle holds none of the webhook: its code is a chunk that only `inject` imports', async (t) => {
  const { readFileSync } = await import('node:fs')
  const { main } = await import('../helpers/process.js')
  const bundle = readFileSync(main, 'utf8')
  t.notOk(bundle.includes('auth-sidecar.io/forward-ca'), 'no annotation of the webhook in dist/main.js')
  t.match(bundle, /import\("\.\/chunks\/run-[A-Z0-9]+\.js"\)/, 'a dynamic import of its chunk')
})
