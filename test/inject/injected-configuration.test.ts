import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import t from 'tap'
import { readConfiguration } from '../../src/config/load.js'
import { mutate } from '../../src/inject/mutate.js'
import { applyPatch, patchOf, podOf, reviewOf } from '../helpers/admission.js'
import { TestCa } from '../helpers/certificates.js'

/**
 * The injected sidecar's environment, read by the sidecar's own
 * configuration loader with each mounted file where the kubelet would put
 * it (under a scratch root): the webhook's variables and paths are ones the
 * sidecar accepts, with nothing to warn about.
 */
t.test('forward mode: the sidecar reads the injected CONFIG_FILE, ports, Secret files and CA', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'auth-sidecar-injected-'))
  t.teardown(() => { rmSync(root, { recursive: true, force: true }) })
  const pod = podOf({
    'auth-sidecar.io/inject': 'true',
    'auth-sidecar.io/config': 'orders-sidecar',
    'auth-sidecar.io/secret': 'orders-credentials',
    'auth-sidecar.io/mode': 'forward',
    'auth-sidecar.io/forward-ca': 'forward-ca'
  })
  pod.spec.containers[0].ports = [{ containerPort: 8080 }]
  const { response } = mutate(reviewOf(pod), 'auth-sidecar:test') as { response: any }
  const sidecar = applyPatch(pod, patchOf(response)!).spec.initContainers[0]
  const at = (path: string): string => join(root, path)
  const env: Record<string, string> = Object.fromEntries(sidecar.env.map((e: { name: string, value: string }) => [e.name, e.value.startsWith('/') ? at(e.value) : e.value]))

  // the Secret's files, the ConfigMap's config.yaml naming one of them, the CA's pair
  const secretDir = sidecar.volumeMounts.find((m: any) => m.name === 'auth-sidecar-secret').mountPath
  mkdirSync(at(secretDir), { recursive: true })
  writeFileSync(at(`${secretDir}/client-secret`), 's3cret')
  mkdirSync(dirname(env.CONFIG_FILE!), { recursive: true })
  writeFileSync(env.CONFIG_FILE!, [
    'BASE_URL: https://orders.example.com/v1',
    'AUTH_TOKEN_URL: https://sso.example.com/token',
    'AUTH_CLIENT_ID: orders',
    'AUTH_GRANT_TYPE: client_credentials',
    `AUTH_CLIENT_SECRET_FILE: ${at(`${secretDir}/client-secret`)}`,
    'PROXY_PORT: 7000',
    ''
  ].join('\n'))
  const ca = TestCa.create(join(root, 'ca'), 'forward CA')
  mkdirSync(dirname(env.FORWARD_PROXY_CA_CERT_FILE!), { recursive: true })
  copyFileSync(ca.caFile, env.FORWARD_PROXY_CA_CERT_FILE!)
  copyFileSync(join(ca.dir, 'ca.key'), env.FORWARD_PROXY_CA_KEY_FILE!)

  const config = await readConfiguration(env, { cwd: root })
  t.match(config.proxy, { host: '127.0.0.1', port: 8081 }, 'past the application\'s 8080')
  t.match(config.admin, { host: '0.0.0.0', port: 9090 })
  t.match(config.forward, { port: 3128, ca: { certFile: env.FORWARD_PROXY_CA_CERT_FILE, keyFile: env.FORWARD_PROXY_CA_KEY_FILE } })
  t.equal(config.routes[0]!.origin, 'https://orders.example.com')
  t.same(config.file?.overridden, ['PROXY_PORT'], 'the webhook\'s ports win over the file\'s, and the start line says so')
  t.same(config.warnings, [], 'nothing to warn about')
})
