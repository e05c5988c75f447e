import t from 'tap'
import { buildPatch } from '../../src/inject/patch.js'
import { decide, type InjectOptions } from '../../src/inject/annotations.js'
import { SIDECAR_RESOURCES } from '../../src/inject/defaults.js'
import { mutate } from '../../src/inject/mutate.js'
import { applyPatch, patchOf, podOf, reviewOf, validatePod, type PodObject } from '../helpers/admission.js'

/**
 * The patch the webhook answers with, applied by fast-json-patch to the
 * pod the API server sent, and the result checked against the Pod schema.
 */
const IMAGE = 'ghcr.io/auth-sidecar/auth-sidecar:0.1.0'
const OPT_IN = { 'auth-sidecar.io/inject': 'true', 'auth-sidecar.io/config': 'orders-sidecar', 'auth-sidecar.io/secret': 'orders-credentials' }

/** The pod as it is after the webhook's answer, and the answer. */
function injected (pod: PodObject): { pod: PodObject, response: any, operations: any[] | undefined } {
  const { response } = mutate(reviewOf(pod), IMAGE) as { response: any }
  const operations = patchOf(response)
  return { pod: operations === undefined ? pod : applyPatch(pod, operations), response, operations }
}

const envOf = (c: any): Record<string, string | undefined> => Object.fromEntries((c.env ?? []).map((e: any) => [e.name, e.value]))

t.test('native: the sidecar first in initContainers, restartPolicy Always, probes, the chart\'s security context, a valid Pod', async (t) => {
  const { pod, response } = injected(podOf(OPT_IN))
  t.equal(response.response.allowed, true)
  t.equal(response.response.patchType, 'JSONPatch')
  t.doesNotThrow(() => { validatePod(pod) }, 'the patched pod is a valid Pod')
  const [sidecar] = pod.spec.initContainers
  t.equal(sidecar.name, 'auth-sidecar')
  t.equal(sidecar.image, IMAGE)
  t.equal(sidecar.restartPolicy, 'Always')
  t.same(sidecar.startupProbe, { httpGet: { path: '/readyz', port: 9090 }, periodSeconds: 2, failureThreshold: 150 }, 'the app starts once every route has its token')
  t.same(sidecar.livenessProbe.httpGet, { path: '/healthz', port: 9090 })
  t.same(sidecar.securityContext, {
    runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false,
    capabilities: { drop: ['ALL'] }, seccompProfile: { type: 'RuntimeDefault' }
  })
  t.same(sidecar.resources, { requests: SIDECAR_RESOURCES.requests, limits: SIDECAR_RESOURCES.limits })
  t.match(envOf(sidecar), { CONFIG_FILE: '/etc/auth-sidecar/config/config.yaml', PROXY_HOST: '127.0.0.1', PROXY_PORT: '8080', ADMIN_PORT: '9090', ADMIN_HOST: '0.0.0.0' })
  t.same(sidecar.volumeMounts, [
    { name: 'auth-sidecar-config', mountPath: '/etc/auth-sidecar/config', readOnly: true },
    { name: 'auth-sidecar-secret', mountPath: '/var/run/secrets/auth-sidecar', readOnly: true }
  ])
  t.same(pod.spec.volumes, [
    { name: 'auth-sidecar-config', configMap: { name: 'orders-sidecar' } },
    { name: 'auth-sidecar-secret', secret: { secretName: 'orders-credentials', defaultMode: 0o444 } }
  ])
  t.equal(pod.spec.containers.length, 1, 'no container added beside the application')
  t.same(pod.spec.containers[0].env, [{ name: 'API_URL', value: 'http://localhost:8080' }], 'the application is told where the proxy is')
  t.equal(pod.metadata.annotations['auth-sidecar.io/status'], 'injected')
})

t.test('arrays absent are added whole; arrays present get items added, nothing of theirs replaced', async (t) => {
  const bare = injected(podOf(OPT_IN))
  t.same(bare.operations!.filter((o) => o.path === '/spec/initContainers' || o.path === '/spec/volumes' || o.path === '/spec/containers/0/env').map((o) => o.op), ['add', 'add', 'add'])

  const full = podOf(OPT_IN, {
    initContainers: [{ name: 'migrate', image: 'ghcr.io/example/migrate:1' }],
    volumes: [{ name: 'data', emptyDir: {} }]
  })
  full.spec.containers[0].env = [{ name: 'LOG_LEVEL', value: 'debug' }]
  full.spec.containers[0].volumeMounts = [{ name: 'data', mountPath: '/data' }]
  const { pod, operations } = injected(full)
  t.ok(operations!.every((o) => o.op === 'add'), 'only adds')
  t.ok(operations!.some((o) => o.path === '/spec/initContainers/0'), 'the sidecar is put first')
  t.ok(operations!.some((o) => o.path === '/spec/volumes/-') && operations!.some((o) => o.path === '/spec/containers/0/env/-'), 'appended with /-')
  t.same(pod.spec.initContainers.map((c: any) => c.name), ['auth-sidecar', 'migrate'], 'before the pod\'s own init containers')
  t.same(pod.spec.volumes.map((v: any) => v.name), ['data', 'auth-sidecar-config', 'auth-sidecar-secret'])
  t.same(pod.spec.containers[0].env, [{ name: 'LOG_LEVEL', value: 'debug' }, { name: 'API_URL', value: 'http://localhost:8080' }])
  t.same(pod.spec.containers[0].volumeMounts, [{ name: 'data', mountPath: '/data' }], 'the application mounts nothing of the sidecar\'s')
  t.doesNotThrow(() => { validatePod(pod) })

  const own = podOf(OPT_IN)
  own.spec.containers[0].env = [{ name: 'API_URL', value: 'http://localhost:9999' }]
  t.same(injected(own).pod.spec.containers[0].env, [{ name: 'API_URL', value: 'http://localhost:9999' }], 'a variable the container sets is kept')
})

t.test('the status annotation: its key escaped, metadata.annotations made when absent, and an injected pod is not patched again', async (t) => {
  const { pod, operations } = injected(podOf(OPT_IN))
  t.ok(operations!.some((o) => o.op === 'add' && o.path === '/metadata/annotations/auth-sidecar.io~1status' && o.value === 'injected'), '/ escaped as ~1')
  const again = injected(pod)
  t.equal(again.operations, undefined, 'a second review of the injected pod has no patch')
  t.equal(again.response.response.allowed, true)

  const options = (decide(OPT_IN) as { options: InjectOptions }).options
  const noAnnotations = podOf(undefined)
  const result = buildPatch(noAnnotations as any, options, IMAGE) as { operations: any[] }
  t.same(result.operations.at(-1), { op: 'add', path: '/metadata/annotations', value: { 'auth-sidecar.io/status': 'injected' } }, 'the map added whole')
  t.same(applyPatch(noAnnotations, result.operations).metadata.annotations, { 'auth-sidecar.io/status': 'injected' })
})

t.test('pods that did not opt in, or not with "true", are allowed unchanged', async (t) => {
  const cases: Array<Record<string, string> | undefined> = [undefined, {}, { 'auth-sidecar.io/inject': 'false' }, { 'auth-sidecar.io/inject': 'yes', 'auth-sidecar.io/config': 'c' }]
  for (const annotations of cases) {
    const { response, operations } = injected(podOf(annotations))
    t.equal(operations, undefined, `${JSON.stringify(annotations)}: no patch`)
    t.same(Object.keys(response.response).sort(), ['allowed', 'uid'])
  }
  const { response } = mutate(reviewOf(podOf(OPT_IN), { operation: 'UPDATE', oldObject: podOf(OPT_IN) }), IMAGE) as { response: any }
  t.equal(response.response.patch, undefined, 'an UPDATE is never patched')
})

t.test('classic (native: "false"): the sidecar last in containers, no startup probe, a valid Pod', async (t) => {
  const { pod } = injected(podOf({ ...OPT_IN, 'auth-sidecar.io/native': 'false' }))
  t.same(pod.spec.containers.map((c: any) => c.name), ['app', 'auth-sidecar'])
  t.notOk(pod.spec.initContainers, 'no initContainers made')
  const sidecar = pod.spec.containers[1]
  t.equal(sidecar.restartPolicy, undefined)
  t.equal(sidecar.startupProbe, undefined)
  t.doesNotThrow(() => { validatePod(pod) })
})

t.test('ports: the sidecar\'s move off every port the pod declares or probes, and off each other', async (t) => {
  const pod = podOf({ ...OPT_IN, 'auth-sidecar.io/mode': 'forward', 'auth-sidecar.io/forward-ca': 'forward-ca' })
  pod.spec.containers[0].ports = [{ containerPort: 8080 }, { containerPort: 9090, name: 'sidecar-admin' }, { containerPort: 3128 }]
  pod.spec.containers[0].livenessProbe = { httpGet: { path: '/', port: 8081 } }
  pod.spec.containers.push({ name: 'metrics', image: 'example/exporter', ports: [{ containerPort: 9091 }], readinessProbe: { tcpSocket: { port: 3129 } } })
  const patched = injected(pod).pod
  const sidecar = patched.spec.initContainers[0]
  const env = envOf(sidecar)
  t.equal(env.PROXY_PORT, '8082', 'past 8080 and the probed 8081')
  t.equal(env.ADMIN_PORT, '9092', 'past 9090 and 9091')
  t.equal(env.FORWARD_PROXY_PORT, '3130', 'past 3128 and the probed 3129')
  t.same(sidecar.ports, [{ containerPort: 9092 }], 'unnamed: the pod already has a port named sidecar-admin')
  t.equal(sidecar.startupProbe.httpGet.port, 9092, 'the probes follow ADMIN_PORT')
  t.equal(envOf(patched.spec.containers[0]).API_URL, 'http://localhost:8082')
  t.equal(envOf(patched.spec.containers[0]).HTTPS_PROXY, 'http://127.0.0.1:3130')
  t.doesNotThrow(() => { validatePod(patched) })
})

t.test('forward mode: proxy variables, NO_PROXY kept after the cluster\'s, the CA certificate alone in the application', async (t) => {
  const pod = podOf({ ...OPT_IN, 'auth-sidecar.io/mode': 'forward', 'auth-sidecar.io/forward-ca': 'forward-ca' }, {
    initContainers: [{ name: 'fetch-schema', image: 'curlimages/curl' }]
  })
  pod.spec.containers[0].env = [{ name: 'NO_PROXY', value: 'db.internal' }, { name: 'SSL_CERT_FILE', value: '/etc/ssl/mine.pem' }]
  pod.spec.containers.push({ name: 'worker', image: 'example/worker', env: [{ name: 'no_proxy', valueFrom: { configMapKeyRef: { name: 'x', key: 'y' } } }] })
  const { pod: patched, response, operations } = injected(pod)
  t.doesNotThrow(() => { validatePod(patched) })
  const [sidecar, init] = patched.spec.initContainers
  t.match(envOf(sidecar), {
    FORWARD_PROXY_PORT: '3128',
    FORWARD_PROXY_CA_CERT_FILE: '/var/run/secrets/auth-sidecar-forward-ca/tls.crt',
    FORWARD_PROXY_CA_KEY_FILE: '/var/run/secrets/auth-sidecar-forward-ca/tls.key'
  })
  t.same(Object.keys(envOf(sidecar)).filter((n) => /proxy$|^SSL_CERT_FILE$/i.test(n) && !n.startsWith('FORWARD')), [], 'the sidecar gets none of the application\'s variables')
  const cluster = 'localhost,127.0.0.1,::1,.svc,.svc.cluster.local,.cluster.local,169.254.169.254'
  const app = envOf(patched.spec.containers[0])
  for (const name of ['HTTPS_PROXY', 'HTTP_PROXY', 'https_proxy', 'http_proxy']) t.equal(app[name], 'http://127.0.0.1:3128', name)
  t.equal(app.NO_PROXY, `${cluster},db.internal`, 'its own NO_PROXY appended to the cluster\'s')
  t.equal(app.no_proxy, cluster)
  t.ok(operations!.some((o) => o.op === 'replace' && o.path === '/spec/containers/0/env/0/value'), 'the value replaced, never the env array')
  t.equal(app.SSL_CERT_FILE, '/etc/ssl/mine.pem', 'a CA variable it sets is kept')
  for (const name of ['NODE_EXTRA_CA_CERTS', 'REQUESTS_CA_BUNDLE', 'CURL_CA_BUNDLE']) t.equal(app[name], '/etc/auth-sidecar-forward-ca/ca.crt', name)
  t.same(patched.spec.containers[0].volumeMounts, [{ name: 'auth-sidecar-forward-ca-bundle', mountPath: '/etc/auth-sidecar-forward-ca', readOnly: true }])
  t.equal(envOf(init).HTTPS_PROXY, 'http://127.0.0.1:3128', 'an init container after the native sidecar reaches the proxy too')
  t.same(patched.spec.containers[1].env.map((e: any) => e.name), ['no_proxy', 'API_URL', 'HTTPS_PROXY', 'HTTP_PROXY', 'https_proxy', 'http_proxy', 'NO_PROXY', 'SSL_CERT_FILE', 'NODE_EXTRA_CA_CERTS', 'REQUESTS_CA_BUNDLE', 'CURL_CA_BUNDLE'],
    'worker: its no_proxy from valueFrom kept, the rest added')
  t.same(patched.spec.containers[1].env[0], pod.spec.containers[1].env[0], 'and left as it was')
  t.match(response.response.warnings, [/worker: its no_proxy comes from valueFrom/])
  const bundle = patched.spec.volumes.find((v: any) => v.name === 'auth-sidecar-forward-ca-bundle')
  t.same(bundle.secret, { secretName: 'forward-ca', items: [{ key: 'tls.crt', path: 'ca.crt' }], defaultMode: 0o444 }, 'the certificate\'s key only')
  t.same(patched.spec.volumes.find((v: any) => v.name === 'auth-sidecar-forward-ca').secret, { secretName: 'forward-ca', defaultMode: 0o444 }, 'the whole CA for the sidecar')
  t.notOk(patched.spec.containers.some((c: any) => (c.volumeMounts ?? []).some((m: any) => m.name === 'auth-sidecar-forward-ca')), 'no application container mounts the CA\'s key')

  const classic = injected(podOf({ ...OPT_IN, 'auth-sidecar.io/native': 'false', 'auth-sidecar.io/mode': 'forward', 'auth-sidecar.io/forward-ca': 'forward-ca' }, {
    initContainers: [{ name: 'fetch-schema', image: 'curlimages/curl' }]
  })).pod
  t.equal(classic.spec.initContainers[0].env, undefined, 'classic: init containers run before the sidecar and get nothing')
})

t.test('resource annotations override the defaults; an invalid one leaves the pod unchanged with a warning naming it', async (t) => {
  const { pod } = injected(podOf({ ...OPT_IN, 'auth-sidecar.io/cpu-request': '100m', 'auth-sidecar.io/cpu-limit': '1', 'auth-sidecar.io/memory-limit': '64Mi' }))
  t.same(pod.spec.initContainers[0].resources, { requests: { cpu: '100m', memory: '64Mi' }, limits: { cpu: '1', memory: '64Mi' } }, 'a limit under the default request lowers the request')
  t.doesNotThrow(() => { validatePod(pod) })

  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ 'auth-sidecar.io/memory-request': 'lots' }, /auth-sidecar\.io\/memory-request must be a Kubernetes quantity/],
    [{ 'auth-sidecar.io/cpu-request': '2', 'auth-sidecar.io/cpu-limit': '500m' }, /auth-sidecar\.io\/cpu-request \(2\) is above auth-sidecar\.io\/cpu-limit \(500m\)/],
    [{ 'auth-sidecar.io/native': 'no' }, /auth-sidecar\.io\/native must be "true" or "false"/],
    [{ 'auth-sidecar.io/mode': 'forward' }, /auth-sidecar\.io\/forward-ca is required/],
    [{ 'auth-sidecar.io/config': '' }, /auth-sidecar\.io\/config is required/],
    [{ 'auth-sidecar.io/secret': 'Bad_Name' }, /auth-sidecar\.io\/secret must name a Secret/]
  ]
  for (const [annotations, warning] of cases) {
    const { response, operations } = injected(podOf({ ...OPT_IN, ...annotations }))
    t.equal(operations, undefined, `${JSON.stringify(annotations)}: no patch`)
    t.equal(response.response.allowed, true)
    t.match(response.response.warnings, [warning])
  }
  const named = podOf(OPT_IN)
  named.spec.containers[0].name = 'auth-sidecar'
  t.match(injected(named).response.response.warnings, [/already has a container named auth-sidecar/], 'a pod with the chart\'s sidecar is left alone')
  t.match(injected(podOf(OPT_IN, { hostNetwork: true })).response.response.warnings, [/host's network/])
})
