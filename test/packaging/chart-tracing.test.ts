import { execFileSync, spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Ajv } from 'ajv'
import t from 'tap'
import { parse } from 'yaml'
import { chart, helm, helmArgs, helmTest, render, renderParentPod, validate, type K8sObject } from '../helpers/helm.js'
import { root } from '../helpers/process.js'

/**
 * The chart's tracing values as Kubernetes gets them, rendered by Helm
 * (scripts/helm.mjs finds one): the OpenTelemetry SDK's OTEL_* variables on
 * the sidecar container when enabled, in this chart and in another that adds
 * the sidecar with the named templates, and nothing of it when off.
 */
interface EnvVar { name: string, value?: string, valueFrom?: { fieldRef?: { fieldPath: string } } }
interface Container { name: string, env: EnvVar[] }

const ON = ['tracing.enabled=true']
const COLLECTOR = 'http://otel-collector.observability:4318'
const ZIPKIN = 'http://zipkin.observability:9411/api/v2/spans'

function containers (spec: any): Container[] {
  return [...(spec.initContainers ?? []), ...spec.containers]
}

function pod (objects: K8sObject[]): { sidecar: Container, app: Container } {
  const all = containers(objects.find((o) => o.kind === 'Deployment')!.spec.template.spec)
  return { sidecar: all.find((c) => c.name === 'auth-sidecar')!, app: all.find((c) => c.name === 'app')! }
}

function envOf (container: Container): Record<string, string | undefined> {
  return Object.fromEntries(container.env.map((e) => [e.name, e.value]))
}

/**
 * The container's environment as the kubelet gives it to the process: a
 * fieldRef resolved to `fields`, and `$(VAR)` replaced by the value of an
 * entry before it (`$$` is a literal `$`; an unknown name is left as it is).
 */
function kubeletEnv (env: EnvVar[], fields: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {}
  for (const e of env) {
    if (e.valueFrom?.fieldRef !== undefined) out[e.name] = fields[e.valueFrom.fieldRef.fieldPath]!
    else if (e.value !== undefined) out[e.name] = e.value.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (ref, name?: string) => name === undefined ? '$' : out[name] ?? ref)
  }
  return out
}

/** The resource attributes the OpenTelemetry SDK reads from `env` (its own OTEL_RESOURCE_ATTRIBUTES parser, in a process of its own). */
function sdkResourceAttributes (env: Record<string, string>): Record<string, string> {
  const script = "const { envDetector } = await import('@opentelemetry/resources'); process.stdout.write(JSON.stringify(envDetector.detect().attributes))"
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: root, encoding: 'utf8', env: { PATH: process.env.PATH ?? '', ...env } })
  return JSON.parse(out) as Record<string, string>
}

helmTest('off (the default): no OTEL_ variable, whatever else tracing holds', async (t) => {
  const plain = render()
  const configured = render(['tracing.exporter=zipkin', `tracing.endpoint=${ZIPKIN}`, 'tracing.serviceName=legacy-sidecar'], ['tracing.resourceAttributes={"team":"billing"}'])
  t.same(configured, plain, 'the same objects as without tracing values')
  const text = JSON.stringify(plain)
  for (const trace of ['OTEL_', 'K8S_POD_NAME', 'K8S_NAMESPACE_NAME', 'fieldRef']) t.notOk(text.includes(trace), `no ${trace}`)
})

helmTest('otlp: the exporter, the collector, the sampler and the resource attributes, in both kinds of sidecar', async (t) => {
  for (const native of [true, false]) {
    const objects = render([...ON, `tracing.endpoint=${COLLECTOR}`, `sidecar.native=${native}`])
    for (const object of objects) await validate(t, object)
    const { sidecar, app } = pod(objects)
    const env = envOf(sidecar)
    t.equal(env.OTEL_TRACES_EXPORTER, 'otlp', `native=${native}: OTEL_TRACES_EXPORTER`)
    t.equal(env.OTEL_EXPORTER_OTLP_ENDPOINT, COLLECTOR)
    t.equal(env.OTEL_EXPORTER_ZIPKIN_ENDPOINT, undefined, 'no Zipkin endpoint')
    t.equal(env.OTEL_TRACES_SAMPLER, 'parentbased_traceidratio')
    t.equal(env.OTEL_TRACES_SAMPLER_ARG, '0.1')
    t.equal(env.OTEL_SERVICE_NAME, undefined, 'no service name: the sidecar\'s own default, auth-sidecar')
    t.equal(env.OTEL_RESOURCE_ATTRIBUTES, 'k8s.pod.name=$(K8S_POD_NAME),k8s.namespace.name=$(K8S_NAMESPACE_NAME)')
    const names = sidecar.env.map((e) => e.name)
    t.same(sidecar.env.filter((e) => e.name.startsWith('K8S_')), [
      { name: 'K8S_POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
      { name: 'K8S_NAMESPACE_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } }
    ], 'the pod\'s name and namespace from the downward API')
    t.ok(names.indexOf('K8S_NAMESPACE_NAME') < names.indexOf('OTEL_RESOURCE_ATTRIBUTES'), 'before OTEL_RESOURCE_ATTRIBUTES: Kubernetes expands only earlier entries')
    t.notOk(app.env.some((e) => e.name.startsWith('OTEL_') || e.name.startsWith('K8S_')), 'the application gets none of it')
  }
  const set = render([...ON, 'tracing.serviceName=legacy-sidecar', 'tracing.sampler=always_on'])
  const env = envOf(pod(set).sidecar)
  t.equal(env.OTEL_SERVICE_NAME, 'legacy-sidecar', 'serviceName set: OTEL_SERVICE_NAME')
  t.equal(env.OTEL_TRACES_SAMPLER, 'always_on')
  t.equal(env.OTEL_TRACES_SAMPLER_ARG, undefined, 'no argument for a sampler that takes none')
  t.equal(env.OTEL_EXPORTER_OTLP_ENDPOINT, undefined, 'no endpoint: the SDK\'s default on localhost')
  t.equal(envOf(pod(render([...ON, 'tracing.samplerArg=1'])).sidecar).OTEL_TRACES_SAMPLER_ARG, '1', 'a number from --set, as the SDK reads it')
})

helmTest('zipkin: the spans URL in OTEL_EXPORTER_ZIPKIN_ENDPOINT', async (t) => {
  const objects = render([...ON, 'tracing.exporter=zipkin', `tracing.endpoint=${ZIPKIN}`])
  for (const object of objects) await validate(t, object)
  const env = envOf(pod(objects).sidecar)
  t.equal(env.OTEL_TRACES_EXPORTER, 'zipkin')
  t.equal(env.OTEL_EXPORTER_ZIPKIN_ENDPOINT, ZIPKIN)
  t.equal(env.OTEL_EXPORTER_OTLP_ENDPOINT, undefined, 'no OTLP endpoint')
})

helmTest('resource attributes reach the SDK as written, the pod\'s own first, and the sidecar reads its tracing settings back', async (t) => {
  const attributes = { 'deployment.environment.name': 'production', 'team': 'billing, reports=yes', 'cost.centre': '50% $(K8S_POD_NAME) ', 'replica.count': 3 }
  const { sidecar } = pod(render([...ON, 'tracing.serviceName=legacy-sidecar'], [`tracing.resourceAttributes=${JSON.stringify(attributes)}`]))
  const env = kubeletEnv(sidecar.env, { 'metadata.name': 'legacy-7d9f-x2x4q', 'metadata.namespace': 'shop' })
  t.same(sdkResourceAttributes(env), {
    'k8s.pod.name': 'legacy-7d9f-x2x4q',
    'k8s.namespace.name': 'shop',
    'cost.centre': '50% $(K8S_POD_NAME) ',
    'deployment.environment.name': 'production',
    'replica.count': '3',
    'team': 'billing, reports=yes',
    'service.name': 'legacy-sidecar'
  }, 'commas, equals signs, percent signs, $(...) and spaces survive; nothing is dropped')

  // the sidecar's own configuration: tracing on, the service named by OTEL_SERVICE_NAME, nothing to warn of
  const cwd = mkdtempSync(join(tmpdir(), 'auth-sidecar-chart-tracing-'))
  t.teardown(() => rmSync(cwd, { recursive: true, force: true }))
  for (const [name, value] of Object.entries(env)) {
    if (!value.startsWith('/var/run/secrets/')) continue
    env[name] = join(cwd, value)
    mkdirSync(join(env[name], '..'), { recursive: true })
    writeFileSync(env[name], 'x')
  }
  const { loadConfig } = await import('../../src/config/load.js')
  const config = loadConfig(env, { cwd })
  t.same(config.tracing, { exporter: 'otlp', serviceName: undefined })
  t.same(config.warnings.filter((w) => /OTEL_|K8S_/.test(w)), [], 'K8S_POD_NAME and the OTEL_ variables are no misspellings')
  const unnamed = loadConfig({ ...env, OTEL_SERVICE_NAME: '' }, { cwd })
  t.same(unnamed.tracing, { exporter: 'otlp', serviceName: 'auth-sidecar' }, 'without serviceName: the sidecar\'s default')
})

helmTest('a chart that adds the sidecar with the named templates gets the same variables', async (t) => {
  const objects = renderParentPod(t, {
    authSidecarTracing: { enabled: true, exporter: 'otlp', endpoint: COLLECTOR, sampler: 'parentbased_traceidratio', samplerArg: '0.25', serviceName: '', resourceAttributes: { team: 'billing' } }
  }, `apiVersion: v1
kind: Pod
metadata:
  name: legacy
spec:
  containers:
    - name: app
      image: legacy:1
  initContainers:
    {{- include "auth-sidecar.container" (dict "sidecar" .Values.authSidecar "secretName" "my-credentials"
          "keys" (dict "username" "username" "password" "password" "clientSecret" "client-secret")
          "native" true "followToken" false "appVersion" "0.1.0" "tracing" .Values.authSidecarTracing) | nindent 4 }}
  volumes:
    {{- include "auth-sidecar.volume" (dict "secretName" "my-credentials") | nindent 4 }}
`)
  t.equal(objects.length, 1)
  await validate(t, objects[0]!)
  const sidecar = containers(objects[0]!.spec).find((c) => c.name === 'auth-sidecar')!
  t.match(envOf(sidecar), {
    OTEL_TRACES_EXPORTER: 'otlp',
    OTEL_EXPORTER_OTLP_ENDPOINT: COLLECTOR,
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: '0.25',
    OTEL_RESOURCE_ATTRIBUTES: 'k8s.pod.name=$(K8S_POD_NAME),k8s.namespace.name=$(K8S_NAMESPACE_NAME),team=billing'
  })
})

t.test('the schema types tracing and refuses what the SDK would not take', async (t) => {
  const schema = JSON.parse(readFileSync(`${chart}/values.schema.json`, 'utf8')) as object
  const values = parse(readFileSync(`${chart}/values.yaml`, 'utf8')) as Record<string, any>
  const ciValues = parse(readFileSync(`${chart}/ci/test-values.yaml`, 'utf8')) as Record<string, any>
  const validate = new Ajv({ allErrors: true, strict: false }).compile(schema)
  const withTracing = (tracing: Record<string, unknown>): unknown => ({ ...values, ...ciValues, sidecar: { ...values.sidecar, env: { ...values.sidecar.env, ...ciValues.sidecar.env } }, tracing: { ...values.tracing, ...tracing } })
  t.match(values.tracing, { enabled: false, exporter: 'otlp', sampler: 'parentbased_traceidratio', samplerArg: '0.1', serviceName: '' }, 'off by default')
  for (const [why, good] of [
    ['otlp to a collector', { enabled: true, endpoint: COLLECTOR, resourceAttributes: { 'deployment.environment.name': 'production', 'replica.count': 3 } }],
    ['zipkin', { enabled: true, exporter: 'zipkin', endpoint: ZIPKIN }],
    ['a ratio as a number', { samplerArg: 0.5 }]
  ] as const) {
    t.equal(validate(withTracing(good)), true, `${why}: ${JSON.stringify(validate.errors)}`)
  }
  for (const [why, bad] of [
    ['an unknown exporter', { exporter: 'jaeger' }],
    ['the console exporter, which writes spans into the sidecar\'s log', { exporter: 'console' }],
    ['an unknown sampler', { sampler: 'ratio' }],
    ['a ratio above 1', { samplerArg: '1.5' }],
    ['a ratio above 1, as a number', { samplerArg: 2 }],
    ['an endpoint that is no URL', { endpoint: 'otel-collector:4318' }],
    ['a value longer than the SDK keeps', { resourceAttributes: { note: 'x'.repeat(256) } }],
    ['a misspelt key', { sampleRate: '0.1' }]
  ] as const) {
    t.equal(validate(withTracing(bad)), false, `${why}: refused`)
  }
})

helmTest('Helm refuses an unknown exporter, naming the value', async (t) => {
  const result = spawnSync(helm, helmArgs([...ON, 'tracing.exporter=jaeger']), { encoding: 'utf8' })
  t.not(result.status, 0, 'refused')
  t.match(result.stderr, /\/tracing\/exporter/)
  const lint = spawnSync(helm, ['lint', chart, '-f', `${chart}/ci/test-values.yaml`, ...[...ON, `tracing.endpoint=${COLLECTOR}`].flatMap((s) => ['--set', s])], { encoding: 'utf8' })
  t.equal(lint.status, 0, lint.stdout + lint.stderr)
})
