import { spawnSync } from 'node:child_process'
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Ajv } from 'ajv'
import type { Test } from 'tap'
import { parse } from 'yaml'
import { chart, helm, helmArgs, helmTest, render, validate, type K8sObject } from '../helpers/helm.js'

/**
 * The chart's forwardProxy values as Kubernetes gets them, rendered by Helm
 * (scripts/helm.mjs finds one): the sidecar's FORWARD_PROXY_* and its CA,
 * the application's proxy variables and the CA's certificate alone, and
 * nothing of it when it is off.
 */
interface EnvVar { name: string, value?: string }
interface Container { name: string, env: EnvVar[], ports?: Array<{ containerPort: number }>, volumeMounts?: Array<Record<string, unknown>> }

const ON = ['forwardProxy.enabled=true', 'forwardProxy.ca.secretName=forward-ca']
const CA_DIR = '/var/run/secrets/auth-sidecar-forward-ca'
const BUNDLE = '/etc/auth-sidecar-forward-ca/ca.crt'
const DEFAULT_NO_PROXY = 'localhost,127.0.0.1,::1,.svc,.svc.cluster.local,.cluster.local,169.254.169.254'

/** The render's error output; the render must fail. */
function refused (t: Test, set: string[], json: string[] = []): string {
  const result = spawnSync(helm, helmArgs(set, json), { encoding: 'utf8' })
  t.not(result.status, 0, `--set ${[...set, ...json].join(' ')}: refused`)
  return result.stderr
}

function pod (objects: K8sObject[]): { spec: any, sidecar: Container, app: Container } {
  const spec = objects.find((o) => o.kind === 'Deployment')!.spec.template.spec
  const containers: Container[] = [...(spec.initContainers ?? []), ...spec.containers]
  return { spec, sidecar: containers.find((c) => c.name === 'auth-sidecar')!, app: containers.find((c) => c.name === 'app')! }
}

function envOf (container: Container): Record<string, string | undefined> {
  return Object.fromEntries(container.env.map((e) => [e.name, e.value]))
}

helmTest('enabled: the sidecar gets FORWARD_PROXY_* and its CA mounted whole, and nothing is open outside the pod', async (t) => {
  const allow = ['*.amazonaws.com', 'github.com:443', '10.0.0.5']
  for (const native of [true, false]) {
    const objects = render([...ON, `sidecar.native=${native}`], [`forwardProxy.allow=${JSON.stringify(allow)}`])
    for (const object of objects) await validate(t, object)
    const { spec, sidecar } = pod(objects)
    const env = envOf(sidecar)
    t.equal(env.FORWARD_PROXY_PORT, '3128', `native=${native}: FORWARD_PROXY_PORT`)
    t.equal(env.FORWARD_PROXY_CA_CERT_FILE, `${CA_DIR}/tls.crt`)
    t.equal(env.FORWARD_PROXY_CA_KEY_FILE, `${CA_DIR}/tls.key`)
    t.equal(env.FORWARD_PROXY_ALLOW, '*.amazonaws.com,github.com:443,10.0.0.5')
    // the sidecar's own egress follows HTTPS_PROXY: the application's would send it into itself
    t.same(Object.keys(env).filter((n) => /^(https?_proxy|no_proxy|SSL_CERT_FILE)$/i.test(n)), [], 'none of the application\'s variables')
    t.same(sidecar.volumeMounts!.find((m) => m.name === 'auth-sidecar-forward-ca'), { name: 'auth-sidecar-forward-ca', mountPath: CA_DIR, readOnly: true },
      'the whole Secret, read-only, no subPath: a renewed CA reaches the sidecar')
    t.same(spec.volumes.find((v: { name: string }) => v.name === 'auth-sidecar-forward-ca'),
      { name: 'auth-sidecar-forward-ca', secret: { secretName: 'forward-ca', defaultMode: 0o440 } }, 'every key, as readable as the credentials')
    t.notOk(JSON.stringify([...spec.containers, ...(spec.initContainers ?? [])].flatMap((c: Container) => c.ports ?? [])).includes('3128'), 'the proxy\'s port is not a container port')
  }
  const service = (objects: K8sObject[]): unknown => objects.find((o) => o.kind === 'Service')!.spec
  t.same(service(render(ON)), service(render()), 'the Service is the same as without it')
})

helmTest('enabled: the sidecar\'s own configuration reads the rendered variables back', async (t) => {
  const { sidecar } = pod(render(ON, ['forwardProxy.allow=["*.amazonaws.com","github.com:443"]']))
  const env = Object.fromEntries(sidecar.env.filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]))
  const { TestCa } = await import('../helpers/certificates.js')
  const { loadConfig } = await import('../../src/config/load.js')
  const cwd = mkdtempSync(join(tmpdir(), 'auth-sidecar-chart-forward-'))
  t.teardown(() => rmSync(cwd, { recursive: true, force: true }))
  const ca = TestCa.create(join(cwd, 'ca'), 'forward CA')
  // every file where the kubelet would mount it, under a scratch root
  mkdirSync(join(cwd, CA_DIR), { recursive: true })
  copyFileSync(ca.caFile, join(cwd, env.FORWARD_PROXY_CA_CERT_FILE!))
  copyFileSync(join(ca.dir, 'ca.key'), join(cwd, env.FORWARD_PROXY_CA_KEY_FILE!))
  for (const [name, value] of Object.entries(env)) {
    if (!value.startsWith('/var/run/secrets/')) continue
    env[name] = join(cwd, value)
    if (!name.startsWith('FORWARD_PROXY_')) {
      mkdirSync(join(env[name], '..'), { recursive: true })
      writeFileSync(env[name], 'x')
    }
  }
  const config = loadConfig(env, { cwd })
  t.match(config.forward, {
    port: 3128,
    ca: { certFile: join(cwd, CA_DIR, 'tls.crt'), keyFile: join(cwd, CA_DIR, 'tls.key') },
    allow: [{ host: 'amazonaws.com', kind: 'domain' }, { host: 'github.com', kind: 'host', port: 443 }]
  })
  t.same(config.warnings.filter((w) => w.includes('FORWARD_PROXY')), [], 'nothing about FORWARD_PROXY_* to warn of')
})

helmTest('enabled: the application gets the proxy in both cases, NO_PROXY, and the CA\'s certificate alone', async (t) => {
  const { spec, app } = pod(render(ON))
  const env = envOf(app)
  for (const name of ['HTTPS_PROXY', 'HTTP_PROXY', 'https_proxy', 'http_proxy']) t.equal(env[name], 'http://127.0.0.1:3128', name)
  t.equal(env.NO_PROXY, DEFAULT_NO_PROXY)
  t.equal(env.no_proxy, DEFAULT_NO_PROXY)
  for (const name of ['SSL_CERT_FILE', 'NODE_EXTRA_CA_CERTS', 'REQUESTS_CA_BUNDLE', 'CURL_CA_BUNDLE']) t.equal(env[name], BUNDLE, name)
  t.equal(env.JAVA_TOOL_OPTIONS, undefined, 'no JVM options unless asked')
  t.equal(env.API_URL, 'http://localhost:8080', 'API_URL as before')
  t.same(app.volumeMounts, [{ name: 'auth-sidecar-forward-ca-bundle', mountPath: '/etc/auth-sidecar-forward-ca', readOnly: true }], 'the bundle only, not the sidecar\'s CA volume')
  const bundle = spec.volumes.find((v: { name: string }) => v.name === 'auth-sidecar-forward-ca-bundle')
  t.same(bundle, { name: 'auth-sidecar-forward-ca-bundle', secret: { secretName: 'forward-ca', items: [{ key: 'tls.crt', path: 'ca.crt' }], defaultMode: 0o444 } },
    'the certificate\'s key alone, readable by any user the application runs as')
  t.notMatch(JSON.stringify(bundle), /tls\.key/, 'never the CA\'s key')

  // other key names, and the application's own env coming last so that it wins
  const custom = pod(render([...ON, 'forwardProxy.ca.certKey=ca.pem', 'forwardProxy.ca.keyKey=ca-key.pem', 'forwardProxy.port=3129'], ['app.env=[{"name":"NO_PROXY","value":"example.internal"}]']))
  const customEnv = envOf(custom.sidecar)
  t.equal(customEnv.FORWARD_PROXY_PORT, '3129')
  t.equal(customEnv.FORWARD_PROXY_CA_CERT_FILE, `${CA_DIR}/ca.pem`)
  t.equal(customEnv.FORWARD_PROXY_CA_KEY_FILE, `${CA_DIR}/ca-key.pem`)
  t.equal(envOf(custom.app).HTTPS_PROXY, 'http://127.0.0.1:3129')
  t.same(custom.spec.volumes.find((v: { name: string }) => v.name === 'auth-sidecar-forward-ca-bundle').secret.items, [{ key: 'ca.pem', path: 'ca.crt' }])
  t.equal(custom.app.env.filter((e) => e.name === 'NO_PROXY').at(-1)!.value, 'example.internal', 'app.env comes after the chart\'s: the last one is the application\'s')
})

helmTest('caBundle and the JVM: a trimmed list of variables, a combined bundle from a ConfigMap, the proxy properties', async (t) => {
  const trimmed = envOf(pod(render(ON, ['forwardProxy.caBundle.variables=["NODE_EXTRA_CA_CERTS"]'])).app)
  t.equal(trimmed.NODE_EXTRA_CA_CERTS, BUNDLE)
  for (const name of ['SSL_CERT_FILE', 'REQUESTS_CA_BUNDLE', 'CURL_CA_BUNDLE']) t.equal(trimmed[name], undefined, `${name} left out: the system's CAs stay`)

  const objects = render([...ON, 'forwardProxy.caBundle.configMap=trust-bundle'])
  for (const object of objects) await validate(t, object)
  const { spec, sidecar, app } = pod(objects)
  t.same(spec.volumes.find((v: { name: string }) => v.name === 'auth-sidecar-forward-ca-bundle'),
    { name: 'auth-sidecar-forward-ca-bundle', configMap: { name: 'trust-bundle', items: [{ key: 'trust-bundle.pem', path: 'ca.crt' }], defaultMode: 0o444 } }, 'the combined bundle at the same path')
  t.equal(envOf(app).SSL_CERT_FILE, BUNDLE)
  t.equal(envOf(sidecar).FORWARD_PROXY_CA_CERT_FILE, `${CA_DIR}/tls.crt`, 'the sidecar still signs with the CA of the Secret')

  const java = envOf(pod(render([...ON, 'forwardProxy.javaToolOptions=true'])).app)
  t.equal(java.JAVA_TOOL_OPTIONS, '-Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=3128 -Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=3128 ' +
    '-Dhttp.nonProxyHosts=localhost|127.0.0.1|[::1]|*.svc|*.svc.cluster.local|*.cluster.local|169.254.169.254', 'NO_PROXY in Java\'s forms; no truststore')
  const cidr = envOf(pod(render([...ON, 'forwardProxy.javaToolOptions=true', 'forwardProxy.noProxy=.internal\\,10.96.0.0/12'])).app)
  t.match(cidr.JAVA_TOOL_OPTIONS, / -Dhttp\.nonProxyHosts=\*\.internal$/, 'a CIDR, which Java cannot read, is left out')

  const v6 = envOf(pod(render([...ON, 'sidecar.env.PROXY_HOST=::1'])).app)
  t.equal(v6.HTTPS_PROXY, 'http://[::1]:3128', 'an IPv6 loopback PROXY_HOST, bracketed')
})

helmTest('disabled (the default): nothing of it is rendered, whatever else forwardProxy holds', async (t) => {
  const plain = render()
  const configured = render(['forwardProxy.ca.secretName=forward-ca', 'forwardProxy.javaToolOptions=true', 'forwardProxy.caBundle.configMap=trust-bundle'], ['forwardProxy.allow=["github.com"]'])
  t.same(configured, plain, 'the same objects as without forwardProxy values')
  const text = JSON.stringify(plain)
  for (const trace of ['FORWARD_PROXY', 'HTTPS_PROXY', 'https_proxy', 'NO_PROXY', 'SSL_CERT_FILE', 'NODE_EXTRA_CA_CERTS', 'JAVA_TOOL_OPTIONS', 'auth-sidecar-forward-ca', '3128']) {
    t.notOk(text.includes(trace), `no ${trace}`)
  }
  t.notOk(pod(plain).app.volumeMounts, 'the application mounts nothing')
})

helmTest('refused: an https upstream without the CA, and a proxy beyond loopback', async (t) => {
  t.match(refused(t, ['forwardProxy.enabled=true']),
    'forwardProxy.ca.secretName is required: an https upstream (BASE_URL) needs the CA that signs the certificates the forward proxy shows the application for its host')
  const routes = '[{"name":"billing","baseUrl":"https://billing.example.com","path":"/billing"},{"name":"plain","baseUrl":"http://plain.internal","port":8081}]'
  t.match(refused(t, ['forwardProxy.enabled=true', 'sidecar.env.BASE_URL=http://api.internal'], [`routes=${routes}`]),
    'forwardProxy.ca.secretName is required: an https upstream (route billing) needs the CA', 'a route\'s https baseUrl, named')
  t.match(refused(t, [...ON, 'sidecar.env.PROXY_HOST=0.0.0.0']),
    'forwardProxy needs sidecar.env.PROXY_HOST on loopback (127.0.0.1 or ::1), not 0.0.0.0: whoever reaches the forward proxy is lent the pod\'s credentials')

  // only http upstreams: no CA is needed, and none is given to the application
  const { spec, sidecar, app } = pod(render(['forwardProxy.enabled=true', 'sidecar.env.BASE_URL=http://api.internal']))
  t.equal(envOf(sidecar).FORWARD_PROXY_PORT, '3128')
  t.equal(envOf(sidecar).FORWARD_PROXY_CA_CERT_FILE, undefined)
  t.equal(envOf(app).HTTPS_PROXY, 'http://127.0.0.1:3128')
  t.equal(envOf(app).SSL_CERT_FILE, undefined, 'no bundle to point at')
  t.notOk(JSON.stringify(spec.volumes).includes('forward-ca'), 'no CA volume')
})

helmTest('the schema types forwardProxy, and helm lint passes with it on', async (t) => {
  const schema = JSON.parse(readFileSync(`${chart}/values.schema.json`, 'utf8')) as object
  const values = parse(readFileSync(`${chart}/values.yaml`, 'utf8')) as Record<string, any>
  const ciValues = parse(readFileSync(`${chart}/ci/test-values.yaml`, 'utf8')) as Record<string, any>
  const validate = new Ajv({ allErrors: true, strict: false }).compile(schema)
  const withForward = (forwardProxy: Record<string, unknown>): unknown => ({ ...values, ...ciValues, sidecar: { ...values.sidecar, env: { ...values.sidecar.env, ...ciValues.sidecar.env } }, forwardProxy: { ...values.forwardProxy, ...forwardProxy } })
  t.equal(validate(withForward({ enabled: true, allow: ['*.example.com', 'github.com:443'], ca: { secretName: 'forward-ca', certKey: 'tls.crt', keyKey: 'tls.key' } })), true, JSON.stringify(validate.errors))
  t.equal(values.forwardProxy.enabled, false, 'off by default')
  for (const [why, bad] of [
    ['a port as a string', { port: '3128' }],
    ['port 0', { port: 0 }],
    ['two patterns in one entry', { allow: ['a.example,b.example'] }],
    ['a variable name with a space', { caBundle: { ...values.forwardProxy.caBundle, variables: ['SSL CERT FILE'] } }],
    ['a misspelt key', { caSecret: 'forward-ca' }],
    ['a misspelt key of ca', { ca: { ...values.forwardProxy.ca, secret: 'forward-ca' } }]
  ] as const) {
    t.equal(validate(withForward(bad)), false, `${why}: refused`)
  }
  const lint = spawnSync(helm, ['lint', chart, '-f', `${chart}/ci/test-values.yaml`, ...ON.flatMap((s) => ['--set', s])], { encoding: 'utf8' })
  t.equal(lint.status, 0, lint.stdout + lint.stderr)
})
