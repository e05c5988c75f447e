import { execFileSync, spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { Ajv } from 'ajv'
import type { Test } from 'tap'
import { parse } from 'yaml'
import { chart, helm, helmArgs, helmTest, parseManifests, render, validate, type K8sObject } from '../helpers/helm.js'

/**
 * The chart's injector values as Kubernetes gets them, rendered by Helm:
 * the webhook's Deployment, PodDisruptionBudget, Service and
 * MutatingWebhookConfiguration, its certificate from a Secret or from
 * cert-manager, and nothing of it when it is off. Every object is checked
 * against its schema (cert-manager's against its CRDs').
 */
const WITH_SECRET = ['injector.enabled=true', 'injector.tls.secretName=injector-tls', 'injector.tls.caBundle=Y2EK']
const WITH_CERT_MANAGER = ['injector.enabled=true', 'injector.certManager.enabled=true']

async function validateAll (t: Test, objects: K8sObject[]): Promise<void> {
  for (const object of objects) {
    if (object.apiVersion === 'cert-manager.io/v1') {
      const models = await import('@kubernetes-models/cert-manager/cert-manager.io/v1') as unknown as Record<string, new (data: object) => { validate(): void }>
      t.doesNotThrow(() => new models[object.kind]!(object).validate(), `${object.kind} ${object.metadata.name} is valid`)
    } else {
      await validate(t, object)
    }
  }
}

const injectorObjects = (objects: K8sObject[]): K8sObject[] => objects.filter((o) => o.metadata.name.includes('injector'))
const one = (objects: K8sObject[], kind: string): any => {
  const found = objects.filter((o) => o.kind === kind && o.metadata.name.includes('injector'))
  if (found.length !== 1) throw new Error(`${found.length} ${kind} of the injector`)
  return found[0]
}

helmTest('enabled with a Secret: Deployment, PodDisruptionBudget, Service and webhook configuration, each valid', async (t) => {
  const objects = render(WITH_SECRET)
  await validateAll(t, objects)
  t.same(injectorObjects(objects).map((o) => o.kind).sort(), ['Deployment', 'MutatingWebhookConfiguration', 'PodDisruptionBudget', 'Service'])

  const deployment = one(objects, 'Deployment')
  t.equal(deployment.spec.replicas, 2, 'two replicas')
  const pod = deployment.spec.template.spec
  t.equal(pod.automountServiceAccountToken, false, 'no service account token: it needs no API access')
  const [container] = pod.containers
  t.same(container.args, ['inject'])
  t.equal(container.image, 'ghcr.io/auth-sidecar/auth-sidecar:0.1.0', 'the sidecar\'s image at the appVersion')
  const env = Object.fromEntries(container.env.map((e: { name: string, value: string }) => [e.name, e.value]))
  t.same(env, {
    INJECT_PORT: '8443',
    INJECT_TLS_CERT_FILE: '/var/run/secrets/auth-sidecar-injector/tls.crt',
    INJECT_TLS_KEY_FILE: '/var/run/secrets/auth-sidecar-injector/tls.key',
    INJECT_IMAGE: 'ghcr.io/auth-sidecar/auth-sidecar:0.1.0',
    INJECT_SHUTDOWN_DELAY_MS: '5000',
    LOG_LEVEL: 'info'
  })
  t.same(container.livenessProbe.httpGet, { path: '/healthz', port: 'https', scheme: 'HTTPS' })
  t.same(container.readinessProbe.httpGet, { path: '/readyz', port: 'https', scheme: 'HTTPS' })
  t.match(container.securityContext, { runAsNonRoot: true, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] }, seccompProfile: { type: 'RuntimeDefault' } })
  t.same(pod.volumes, [{ name: 'serving-certificate', secret: { secretName: 'injector-tls', defaultMode: 0o440 } }])
  t.same(container.volumeMounts, [{ name: 'serving-certificate', mountPath: '/var/run/secrets/auth-sidecar-injector', readOnly: true }], 'whole, no subPath: a renewal reaches it')
  t.equal(pod.securityContext.fsGroup, 65532, 'the 0440 files readable by the webhook\'s user')

  const pdb = one(objects, 'PodDisruptionBudget')
  t.equal(pdb.spec.minAvailable, 1)
  t.same(pdb.spec.selector.matchLabels, deployment.spec.selector.matchLabels)
  const service = one(objects, 'Service')
  t.same(service.spec.ports, [{ name: 'https', port: 443, targetPort: 'https' }])
  t.same(service.spec.selector, deployment.spec.selector.matchLabels, 'the Service selects the webhook\'s pods only')
  const labels = deployment.spec.template.metadata.labels as Record<string, string>
  const selects = (selector: Record<string, string>): boolean => Object.entries(selector).every(([k, v]) => labels[k] === v)
  const application = objects.find((o) => o.kind === 'Deployment' && o !== deployment)!
  t.notOk(selects(application.spec.selector.matchLabels), 'the application\'s Deployment does not select the webhook\'s pods')
  t.notOk(selects(objects.find((o) => o.kind === 'Service' && o !== service)!.spec.selector), 'nor does its Service')

  const [webhook] = one(objects, 'MutatingWebhookConfiguration').webhooks
  t.match(webhook, {
    name: 'inject.auth-sidecar.io',
    admissionReviewVersions: ['v1'],
    sideEffects: 'None',
    failurePolicy: 'Fail',
    timeoutSeconds: 10,
    clientConfig: { service: { name: 't-auth-sidecar-injector', namespace: 'default', path: '/mutate', port: 443 }, caBundle: 'Y2EK' },
    rules: [{ apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE'], resources: ['pods'] }]
  })
  t.same(webhook.namespaceSelector, { matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: ['kube-system', 'default'] }] }, 'never kube-system nor its own namespace')
  t.equal(webhook.objectSelector, undefined)
})

helmTest('the webhook\'s values: failurePolicy, timeout, selectors, images, port', async (t) => {
  const objects = render([...WITH_SECRET, 'injector.failurePolicy=Ignore', 'injector.timeoutSeconds=5', 'injector.port=9443', 'injector.sidecarImage=registry.example.com/auth-sidecar:1.2.3', 'injector.image.repository=registry.example.com/auth-sidecar', 'injector.image.tag=1.2.2', 'injector.replicaCount=1'], [
    'injector.namespaceSelector={"matchLabels":{"auth-sidecar.io/injection":"enabled"},"matchExpressions":[{"key":"tier","operator":"In","values":["apps"]}]}',
    'injector.objectSelector={"matchLabels":{"team":"orders"}}'
  ])
  await validateAll(t, objects)
  const [webhook] = one(objects, 'MutatingWebhookConfiguration').webhooks
  t.equal(webhook.failurePolicy, 'Ignore')
  t.equal(webhook.timeoutSeconds, 5)
  t.same(webhook.namespaceSelector, {
    matchLabels: { 'auth-sidecar.io/injection': 'enabled' },
    matchExpressions: [{ key: 'tier', operator: 'In', values: ['apps'] }, { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: ['kube-system', 'default'] }]
  }, 'the given selector, the exclusions still added')
  t.same(webhook.objectSelector, { matchLabels: { team: 'orders' } })
  const [container] = one(objects, 'Deployment').spec.template.spec.containers
  t.equal(container.image, 'registry.example.com/auth-sidecar:1.2.2')
  t.match(container.env, [{ name: 'INJECT_PORT', value: '9443' }, {}, {}, { name: 'INJECT_IMAGE', value: 'registry.example.com/auth-sidecar:1.2.3' }])
  t.same(container.ports, [{ name: 'https', containerPort: 9443 }])
  t.same(one(objects, 'PodDisruptionBudget').spec.maxUnavailable, 1, 'one replica: a drain may take it')
})

helmTest('cert-manager: a Certificate for the Service\'s names from a self-signed Issuer, its CA injected by cainjector', async (t) => {
  const objects = render(WITH_CERT_MANAGER)
  await validateAll(t, objects)
  const certificate = one(objects, 'Certificate')
  t.match(certificate.spec, {
    secretName: 't-auth-sidecar-injector-tls',
    dnsNames: ['t-auth-sidecar-injector.default.svc', 't-auth-sidecar-injector.default.svc.cluster.local'],
    issuerRef: { name: 't-auth-sidecar-injector', kind: 'Issuer', group: 'cert-manager.io' }
  })
  t.same(one(objects, 'Issuer').spec, { selfSigned: {} })
  const configuration = one(objects, 'MutatingWebhookConfiguration')
  t.equal(configuration.metadata.annotations['cert-manager.io/inject-ca-from'], 'default/t-auth-sidecar-injector', 'namespace/Certificate')
  t.equal(configuration.webhooks[0].clientConfig.caBundle, undefined, 'the cainjector fills it in')
  t.equal(one(objects, 'Deployment').spec.template.spec.volumes[0].secret.secretName, 't-auth-sidecar-injector-tls')

  const own = render([...WITH_CERT_MANAGER], ['injector.certManager.issuerRef={"name":"platform-ca","kind":"ClusterIssuer","group":"cert-manager.io"}'])
  await validateAll(t, own)
  t.same(one(own, 'Certificate').spec.issuerRef, { name: 'platform-ca', kind: 'ClusterIssuer', group: 'cert-manager.io' })
  t.notOk(own.some((o) => o.kind === 'Issuer'), 'no Issuer made')
})

helmTest('refused: no certificate, no CA bundle, values the schema does not know', async (t) => {
  const refused = (set: string[]): string => {
    const result = spawnSync(helm, helmArgs(set), { encoding: 'utf8' })
    t.not(result.status, 0, `--set ${set.join(' ')}: refused`)
    return result.stderr
  }
  t.match(refused(['injector.enabled=true']), /injector\.tls\.secretName is required/)
  t.match(refused(['injector.enabled=true', 'injector.tls.secretName=x']), /injector\.tls\.caBundle is required/)
  t.match(refused([...WITH_SECRET, 'injector.failurePolicy=Sometimes']), /failurePolicy/)
  t.match(refused([...WITH_SECRET, 'injector.timeoutSeconds=31']), /timeoutSeconds/)
  t.match(refused([...WITH_SECRET, 'injector.typo=1']), /typo/)
})

helmTest('disabled (the default): nothing of it, and the rest is as before', async (t) => {
  const plain = render()
  t.same(render(['injector.tls.secretName=x', 'injector.certManager.enabled=true', 'injector.failurePolicy=Ignore']), plain, 'its values alone change nothing')
  t.same(injectorObjects(plain), [])
  t.notOk(JSON.stringify(plain).includes('INJECT_'))
  const enabled = render(WITH_SECRET)
  t.same(enabled.filter((o) => !o.metadata.name.includes('injector')), plain, 'enabled, the application\'s objects are unchanged')
})

helmTest('the schema types the injector values, and helm lint passes with it on', async (t) => {
  const schema = JSON.parse(readFileSync(`${chart}/values.schema.json`, 'utf8')) as object
  const values = parse(readFileSync(`${chart}/values.yaml`, 'utf8')) as Record<string, any>
  const check = new Ajv({ allErrors: true, strict: false }).compile(schema)
  const ciValues = parse(readFileSync(`${chart}/ci/test-values.yaml`, 'utf8')) as Record<string, any>
  t.ok(check({ ...values, ...ciValues, app: { ...values.app, ...ciValues.app }, injector: { ...values.injector, enabled: true, certManager: { ...values.injector.certManager, enabled: true } } }), JSON.stringify(check.errors))
  const lint = spawnSync(helm, ['lint', chart, '-f', `${chart}/ci/test-values.yaml`, ...WITH_CERT_MANAGER.flatMap((s) => ['--set', s])], { encoding: 'utf8' })
  t.equal(lint.status, 0, lint.stdout + lint.stderr)
})

/** `helm template` of the chart with only `set` (no CI values): what a release of the injector alone passes. */
const renderText = (args: string[]): string => execFileSync(helm, ['template', 't', chart, ...args], { encoding: 'utf8' })
const sets = (set: string[]): string[] => set.flatMap((s) => ['--set', s])
/** The rendered documents of the injector's templates, as text. */
const injectorDocuments = (text: string): string[] => text.split(/^---\n/m).filter((d) => d.startsWith('# Source: auth-sidecar/templates/injector-'))
const INJECTOR_ONLY = ['app.enabled=false']

helmTest('app.enabled=false: only the injector\'s objects, each valid, and none of the application\'s values needed', async (t) => {
  const withSecret = parseManifests(renderText(sets([...INJECTOR_ONLY, ...WITH_SECRET])))
  await validateAll(t, withSecret)
  t.same(withSecret.map((o) => o.kind).sort(), ['Deployment', 'MutatingWebhookConfiguration', 'PodDisruptionBudget', 'Service'])
  t.same(injectorObjects(withSecret), withSecret, 'every object is the injector\'s')
  t.equal(one(withSecret, 'Deployment').spec.template.spec.containers[0].image, 'ghcr.io/auth-sidecar/auth-sidecar:0.1.0', 'the image still from sidecar.image')

  const withCertManager = parseManifests(renderText(sets([...INJECTOR_ONLY, ...WITH_CERT_MANAGER])))
  await validateAll(t, withCertManager)
  t.same(withCertManager.map((o) => o.kind).sort(), ['Certificate', 'Deployment', 'Issuer', 'MutatingWebhookConfiguration', 'PodDisruptionBudget', 'Service'])

  // the application's values, given anyway, render nothing of it
  const leftovers = parseManifests(renderText(['-f', `${chart}/ci/test-values.yaml`, ...sets([...INJECTOR_ONLY, ...WITH_SECRET, 'metrics.prometheusRule.enabled=true', 'forwardProxy.enabled=true', 'forwardProxy.ca.secretName=ca']), '--set-json', 'config={"LOG_LEVEL":"debug"}']))
  t.same(leftovers.map((o) => o.kind).sort(), ['Deployment', 'MutatingWebhookConfiguration', 'PodDisruptionBudget', 'Service'], 'no Secret, ConfigMap, ServiceMonitor or PrometheusRule')
  t.notOk(JSON.stringify(leftovers).includes('legacy-app'), 'nothing of the application')

  t.equal(renderText(sets(INJECTOR_ONLY)).trim(), '', 'with the injector off too: nothing at all')
})

helmTest('app.enabled: true is the default, and the injector renders the same bytes with or without the application', async (t) => {
  const ci = ['-f', `${chart}/ci/test-values.yaml`]
  for (const set of [[], WITH_SECRET, WITH_CERT_MANAGER]) {
    t.equal(renderText([...ci, ...sets([...set, 'app.enabled=true'])]), renderText([...ci, ...sets(set)]), `--set ${set.join(',') || '(none)'}: app.enabled=true changes nothing`)
  }
  for (const set of [WITH_SECRET, WITH_CERT_MANAGER]) {
    const beside = injectorDocuments(renderText([...ci, ...sets(set)]))
    t.ok(beside.length >= 4)
    t.same(injectorDocuments(renderText([...ci, ...sets([...INJECTOR_ONLY, ...set])])), beside, 'the same documents, byte for byte')
    t.same(injectorDocuments(renderText(sets([...INJECTOR_ONLY, ...set]))), beside, 'without the application\'s values too')
  }
})

helmTest('the schema requires the application\'s values unless app.enabled is false', async (t) => {
  for (const enabled of [[], ['app.enabled=true']]) {
    const result = spawnSync(helm, ['template', 't', chart, ...sets([...enabled, ...WITH_SECRET])], { encoding: 'utf8' })
    t.not(result.status, 0, `--set ${enabled.join(',') || '(app.enabled unset)'}: refused without the application's values`)
    t.match(result.stderr, /\/app\/image\/repository/)
    t.match(result.stderr, /\/sidecar\/env\/BASE_URL/)
  }
  const typo = spawnSync(helm, ['template', 't', chart, ...sets(['app.enabled=no', ...WITH_SECRET])], { encoding: 'utf8' })
  t.not(typo.status, 0, 'app.enabled is a boolean: "no" is refused')
  t.match(typo.stderr, /\/app\/enabled/)

  const schema = JSON.parse(readFileSync(`${chart}/values.schema.json`, 'utf8')) as object
  const values = parse(readFileSync(`${chart}/values.yaml`, 'utf8')) as Record<string, any>
  const check = new Ajv({ allErrors: true, strict: false }).compile(schema)
  t.equal(values.app.enabled, true, 'on by default')
  t.notOk(check(values), 'the defaults alone: refused')
  t.ok(check({ ...values, app: { ...values.app, enabled: false } }), JSON.stringify(check.errors))
  const lint = spawnSync(helm, ['lint', chart, ...sets([...INJECTOR_ONLY, ...WITH_CERT_MANAGER])], { encoding: 'utf8' })
  t.equal(lint.status, 0, lint.stdout + lint.stderr)
})

helmTest('injector.shutdownDelayMs: the webhook\'s INJECT_SHUTDOWN_DELAY_MS, and a termination grace period that outlasts it and the close', async (t) => {
  const { CLOSE_GRACE_MS } = await import('../../src/inject/shutdown.js')
  const { DEFAULT_INJECT_SHUTDOWN_DELAY_MS } = await import('../../src/config/inject.js')
  for (const [set, delayMs] of [[[], DEFAULT_INJECT_SHUTDOWN_DELAY_MS], [['injector.shutdownDelayMs=0'], 0], [['injector.shutdownDelayMs=1500'], 1500], [['injector.shutdownDelayMs=60000'], 60000]] as Array<[string[], number]>) {
    const objects = render([...WITH_SECRET, ...set])
    await validateAll(t, objects)
    const pod = one(objects, 'Deployment').spec.template.spec
    const env = Object.fromEntries(pod.containers[0].env.map((e: { name: string, value: string }) => [e.name, e.value]))
    t.equal(env.INJECT_SHUTDOWN_DELAY_MS, String(delayMs), `${delayMs}: passed on`)
    t.ok(pod.terminationGracePeriodSeconds * 1000 > delayMs + CLOSE_GRACE_MS, `${delayMs}: ${pod.terminationGracePeriodSeconds} s outlast the delay and the close`)
  }
  const refused = (set: string): string => {
    const result = spawnSync(helm, helmArgs([...WITH_SECRET, set]), { encoding: 'utf8' })
    t.not(result.status, 0, `--set ${set}: refused`)
    return result.stderr
  }
  t.match(refused('injector.shutdownDelayMs=60001'), /shutdownDelayMs/)
  t.match(refused('injector.shutdownDelayMs=-1'), /shutdownDelayMs/)
  t.match(refused('injector.shutdownDelayMs=1.5'), /shutdownDelayMs/)
})
