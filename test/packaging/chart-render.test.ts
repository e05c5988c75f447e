import { execFileSync, spawnSync } from 'node:child_process'
import { chmodSync, chownSync, copyFileSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import t, { type Test } from 'tap'
import { parse } from 'yaml'
import { chart, helm, helmArgs, helmMissing, helmTest, parseManifests, render, renderParentPod, validate } from '../helpers/helm.js'
import { main, root } from '../helpers/process.js'

/**
 * The chart as Kubernetes gets it, rendered by Helm (scripts/helm.mjs finds
 * one): every object is checked against the Kubernetes schemas of
 * kubernetes-models, and the Prometheus operator's objects against its
 * CRDs' schemas, so a wrong field type fails here, not at `kubectl apply`.
 * The pod's security settings are then played out on real files the way
 * the kubelet mounts a Secret, and the built sidecar is run as the
 * container's user to read them: the check that would have caught the
 * EACCES crash loop of a chart without fsGroup.
 */

/** client_credentials with the projected service-account token as the only credential. */
const PROJECTED = [
  'sidecar.env.AUTH_GRANT_TYPE=client_credentials', 'credentials.username=', 'credentials.password=', 'credentials.clientSecret=',
  'credentials.projectedToken.enabled=true', 'credentials.projectedToken.audience=https://sso.example/realms/r'
]

helmTest('rendered with Helm, every object satisfies the Kubernetes schemas and the Prometheus operator\'s', async (t) => {
  const variants = [
    [],
    ['sidecar.native=false', 'credentials.existingSecret=creds'],
    ['sidecar.env.AUTH_GRANT_TYPE=client_credentials', 'credentials.username=', 'credentials.password='],
    ['metrics.serviceMonitor.enabled=true', 'metrics.prometheusRule.enabled=true'],
    [...PROJECTED],
    ['sidecar.env.AUTH_CLIENT_AUTH=private_key_jwt', 'credentials.clientKey=-----BEGIN PRIVATE KEY-----'],
    ['tls.existingSecret=client-cert', 'tls.auth=true', 'metrics.prometheusRule.enabled=true']
  ]
  for (const set of variants) {
    const objects = render(set)
    t.ok(objects.some((o) => o.kind === 'Deployment'), `--set ${set.join(',') || '(none)'}: a Deployment`)
    for (const object of objects) await validate(t, object)
  }
  // a wrong type is caught: the check can fail
  const deployment = render().find((o) => o.kind === 'Deployment')!
  const broken = structuredClone(deployment)
  broken.spec.template.spec.securityContext.fsGroup = '65532'
  const { Deployment } = await import('kubernetes-models/apps/v1')
  t.throws(() => new Deployment(broken as object).validate(), 'fsGroup as a string is refused')
  const rule = render(['metrics.prometheusRule.enabled=true']).find((o) => o.kind === 'PrometheusRule')!
  rule.spec.groups[0].rules[0].for = 5
  const { PrometheusRule } = await import('@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1')
  t.throws(() => new PrometheusRule(rule as never).validate(), 'and so is a PrometheusRule whose `for` is not a duration string')
})

helmTest('client_credentials with a projected service-account token: nothing secret anywhere, no Secret made or mounted', async (t) => {
  const objects = render([...PROJECTED, 'serviceAccountName=legacy-app'])
  t.same(objects.filter((o) => o.kind === 'Secret'), [], 'no Secret')
  const pod = objects.find((o) => o.kind === 'Deployment')!.spec.template.spec
  t.equal(pod.serviceAccountName, 'legacy-app')
  t.same(pod.volumes, [{
    name: 'auth-sidecar-token',
    projected: { sources: [{ serviceAccountToken: { path: 'token', audience: 'https://sso.example/realms/r', expirationSeconds: 3600 } }] }
  }], 'only the projected token')
  const sidecar = pod.initContainers.find((c: { name: string }) => c.name === 'auth-sidecar')
  const env = Object.fromEntries(sidecar.env.map((e: { name: string, value: string }) => [e.name, e.value]))
  t.equal(env.AUTH_CLIENT_AUTH, 'federated_jwt')
  t.equal(env.AUTH_CLIENT_ASSERTION_FILE, '/var/run/secrets/auth-sidecar-token/token')
  t.same(Object.keys(env).filter((n) => /USERNAME|PASSWORD|SECRET|CLIENT_KEY_FILE/.test(n)), [], 'no other credential')
  t.same(sidecar.volumeMounts, [{ name: 'auth-sidecar-token', mountPath: '/var/run/secrets/auth-sidecar-token', readOnly: true }])
  const noAudience = spawnSync(helm, helmArgs(PROJECTED.filter((s) => !s.includes('audience'))), { encoding: 'utf8' })
  t.not(noAudience.status, 0, 'an audience is required')
})

/** Two named routes: one with its own client in its own Secret, one by token exchange on its own port. */
const ROUTES = JSON.stringify([
  {
    name: 'billing',
    baseUrl: 'https://billing.example.com/v1',
    path: '/billing',
    auth: { CLIENT_ID: 'billing-app', GRANT_TYPE: 'client_credentials' },
    existingSecret: 'billing-credentials',
    keys: { clientSecret: 'client-secret' }
  },
  { name: 'reports', baseUrl: 'https://reports.example.com', port: 8081, exchange: { audience: 'reports-api', scope: 'reports' } }
])

helmTest('routes: each a ROUTE_<NAME>_* set the sidecar reads back as configured, its Secret mounted, its URL given to the app', async (t) => {
  const text = execFileSync(helm, ['template', 't', chart, '-f', `${chart}/ci/test-values.yaml`, '--set-json', `routes=${ROUTES}`], { encoding: 'utf8' })
  const objects = parseManifests(text)
  for (const object of objects) await validate(t, object)
  const pod = objects.find((o) => o.kind === 'Deployment')!.spec.template.spec
  const sidecar = [...(pod.initContainers ?? []), ...pod.containers].find((c: { name: string }) => c.name === 'auth-sidecar')
  const env = Object.fromEntries(sidecar.env.filter((e: { value?: string }) => e.value !== undefined).map((e: { name: string, value: string }) => [e.name, e.value]))
  t.equal(env.ROUTE_BILLING_AUTH_CLIENT_SECRET_FILE, '/var/run/secrets/auth-sidecar-routes/billing/client-secret')
  t.same(sidecar.volumeMounts.find((m: { name: string }) => m.name === 'auth-sidecar-route-billing'),
    { name: 'auth-sidecar-route-billing', mountPath: '/var/run/secrets/auth-sidecar-routes/billing', readOnly: true })
  t.same(pod.volumes.find((v: { name: string }) => v.name === 'auth-sidecar-route-billing'),
    { name: 'auth-sidecar-route-billing', secret: { secretName: 'billing-credentials', defaultMode: 0o440 } }, 'its Secret, as readable as the main one')
  const app = pod.containers.find((c: { name: string }) => c.name === 'app')
  const appEnv = Object.fromEntries(app.env.map((e: { name: string, value: string }) => [e.name, e.value]))
  t.equal(appEnv.API_URL_BILLING, 'http://localhost:8080/billing')
  t.equal(appEnv.API_URL_REPORTS, 'http://localhost:8081')
  t.notOk(JSON.stringify(pod.containers.flatMap((c: { ports?: unknown[] }) => c.ports ?? [])).includes('8081'), 'a route\'s port is not a container port')

  // the sidecar's own parser reads the rendered variables back
  const { loadConfig } = await import('../../src/config/load.js')
  const cwd = mkdtempSync(join(tmpdir(), 'auth-sidecar-chart-routes-'))
  t.teardown(() => rmSync(cwd, { recursive: true, force: true }))
  // its files where the kubelet would mount them, under a scratch root
  for (const [name, value] of Object.entries(env)) {
    if (!value.startsWith('/var/run/secrets/')) continue
    env[name] = join(cwd, value)
    mkdirSync(join(env[name], '..'), { recursive: true })
    writeFileSync(env[name], 'x')
  }
  const config = loadConfig(env, { cwd })
  const routes = Object.fromEntries(config.routes.map((r) => [r.name, r]))
  t.same(Object.keys(routes).sort(), ['billing', 'default', 'reports'])
  t.match(routes.billing, { origin: 'https://billing.example.com', basePath: '/v1', path: '/billing', port: undefined })
  t.match(routes.billing!.credential, { auth: { clientId: 'billing-app', grantType: 'client_credentials' } })
  t.match(routes.billing!.credential.sources.clientSecret, { file: join(cwd, '/var/run/secrets/auth-sidecar-routes/billing/client-secret') })
  t.match(routes.reports, { origin: 'https://reports.example.com', port: 8081, path: '' })
  t.match(routes.reports!.credential.exchange, { audience: 'reports-api', scope: 'reports' })
  t.equal(routes.reports!.credential.exchange!.subject, routes.default!.credential, 'exchanges the sidecar\'s own token')

  const bad = spawnSync(helm, ['template', 't', chart, '-f', `${chart}/ci/test-values.yaml`, '--set-json', 'routes=[{"name":"x","baseUrl":"https://x.example"}]'], { encoding: 'utf8' })
  t.not(bad.status, 0, 'a route with neither path nor port is refused')
})

helmTest('a client certificate from a Secret or a CSI volume: mounted whole, named both ways, no Secret made for it', async (t) => {
  const csi = JSON.stringify({ driver: 'csi.cert-manager.io', readOnly: true, volumeAttributes: { 'csi.cert-manager.io/issuer-name': 'workload-ca', 'csi.cert-manager.io/fs-group': '65532' } })
  for (const [how, set] of [['a Secret', ['--set', 'tls.existingSecret=client-cert']], ['a CSI volume', ['--set-json', `tls.csi=${csi}`]]] as const) {
    const text = execFileSync(helm, ['template', 't', chart, '-f', `${chart}/ci/test-values.yaml`, ...set, '--set', 'tls.auth=true'], { encoding: 'utf8' })
    const objects = parseManifests(text)
    for (const object of objects) await validate(t, object)
    t.notOk(objects.some((o) => o.kind === 'Secret' && o.metadata.name.includes('tls')), `${how}: no Secret of the chart's for it`)
    const pod = objects.find((o) => o.kind === 'Deployment')!.spec.template.spec
    const sidecar = [...(pod.initContainers ?? []), ...pod.containers].find((c: { name: string }) => c.name === 'auth-sidecar')
    const env = Object.fromEntries(sidecar.env.map((e: { name: string, value: string }) => [e.name, e.value]))
    for (const way of ['UPSTREAM', 'AUTH']) {
      t.equal(env[`${way}_TLS_CERT_FILE`], '/var/run/secrets/auth-sidecar-tls/tls.crt', `${how}: ${way}_TLS_CERT_FILE`)
      t.equal(env[`${way}_TLS_KEY_FILE`], '/var/run/secrets/auth-sidecar-tls/tls.key')
      t.equal(env[`${way}_TLS_CA_FILE`], '/var/run/secrets/auth-sidecar-tls/ca.crt')
    }
    t.same(sidecar.volumeMounts.find((m: { name: string }) => m.name === 'auth-sidecar-tls'), { name: 'auth-sidecar-tls', mountPath: '/var/run/secrets/auth-sidecar-tls', readOnly: true }, 'the whole volume, no subPath: renewed files reach the sidecar')
    const volume = pod.volumes.find((v: { name: string }) => v.name === 'auth-sidecar-tls')
    if (how === 'a Secret') t.same(volume, { name: 'auth-sidecar-tls', secret: { secretName: 'client-cert', defaultMode: 0o440 } })
    else t.same(volume, { name: 'auth-sidecar-tls', csi: JSON.parse(csi) })
  }
  const rule = render(['metrics.prometheusRule.enabled=true']).find((o) => o.kind === 'PrometheusRule')!
  t.match(rule.spec.groups[0].rules.find((r: { alert: string }) => r.alert === 'AuthSidecarCertificateExpiring'), { expr: /auth_sidecar_certificate_expiry_timestamp_seconds\{.*\} - time\(\) < 1200/ }, 'an alert before a failed renewal bites')
  const both = spawnSync(helm, ['template', 't', chart, '-f', `${chart}/ci/test-values.yaml`, '--set', 'tls.existingSecret=x', '--set-json', `tls.csi=${csi}`], { encoding: 'utf8' })
  t.not(both.status, 0, 'a Secret and a CSI volume at once are refused')
})

helmTest('tls_client_auth: the client authenticates by the mounted certificate, no secret anywhere, and the sidecar reads the configuration back', async (t) => {
  const objects = render(['sidecar.env.AUTH_CLIENT_AUTH=tls_client_auth', 'sidecar.env.AUTH_GRANT_TYPE=client_credentials', 'sidecar.env.AUTH_ISSUER_URL=https://sso.example.com/realms/r',
    'credentials.username=', 'credentials.password=', 'credentials.clientSecret=', 'tls.existingSecret=client-cert', 'tls.auth=true'])
  for (const object of objects) await validate(t, object)
  t.notOk(objects.some((o) => o.kind === 'Secret'), 'no Secret: the certificate is the credential')
  const pod = objects.find((o) => o.kind === 'Deployment')!.spec.template.spec
  const sidecar = [...(pod.initContainers ?? []), ...pod.containers].find((c: { name: string }) => c.name === 'auth-sidecar')
  const env = Object.fromEntries(sidecar.env.filter((e: { value?: string }) => e.value !== undefined).map((e: { name: string, value: string }) => [e.name, e.value]))
  t.equal(env.AUTH_CLIENT_AUTH, 'tls_client_auth')
  // the files where the kubelet would mount them, under a scratch root
  const { TestCa } = await import('../helpers/certificates.js')
  const cwd = mkdtempSync(join(tmpdir(), 'auth-sidecar-chart-tls-'))
  t.teardown(() => rmSync(cwd, { recursive: true, force: true }))
  const ca = TestCa.create(join(cwd, 'ca'))
  const client = ca.issue('client', { cn: 'legacy-app' })
  const mounted = { AUTH_TLS_CERT_FILE: client.cert, AUTH_TLS_KEY_FILE: client.key, AUTH_TLS_CA_FILE: readFileSync(ca.caFile, 'utf8') }
  for (const [name, content] of Object.entries(mounted)) {
    t.ok(String(env[name]).startsWith('/var/run/secrets/auth-sidecar-tls/'), `${name} in the mounted volume`)
    env[name] = join(cwd, env[name])
    mkdirSync(join(env[name], '..'), { recursive: true })
    writeFileSync(env[name], content)
  }
  for (const name of ['UPSTREAM_TLS_CERT_FILE', 'UPSTREAM_TLS_KEY_FILE', 'UPSTREAM_TLS_CA_FILE']) env[name] = join(cwd, env[name])
  const { loadConfig } = await import('../../src/config/load.js')
  const config = loadConfig(env, { cwd })
  t.match(config.routes[0]!.credential.auth, { clientAuth: 'tls_client_auth', grantType: 'client_credentials' })
  t.same(config.routes[0]!.credential.sources, {}, 'no secret source at all')
  const without = spawnSync(helm, ['template', 't', chart, '-f', `${chart}/ci/test-values.yaml`, '--set', 'sidecar.env.AUTH_CLIENT_AUTH=tls_client_auth', '--set', 'tls.existingSecret=client-cert'], { encoding: 'utf8' })
  t.not(without.status, 0, 'without tls.auth the certificate would not reach the auth server: refused')
  t.match(without.stderr, /tls_client_auth needs the client certificate presented to the auth server: tls\.existingSecret or tls\.csi, with tls\.auth=true/)
  const selfSigned = spawnSync(helm, ['template', 't', chart, '-f', `${chart}/ci/test-values.yaml`, '--set', 'sidecar.env.AUTH_CLIENT_AUTH=self_signed_tls_client_auth', '--set', 'tls.existingSecret=client-cert'], { encoding: 'utf8' })
  t.match(selfSigned.stderr, /AUTH_CLIENT_AUTH self_signed_tls_client_auth needs the client certificate presented to the auth server/, 'self_signed_tls_client_auth likewise')
})

helmTest('the README\'s snippet for adding the sidecar to another chart renders a valid pod, with this chart as a dependency', async (t) => {
  const readme = readFileSync(`${chart}/README.md`, 'utf8')
  const snippet = /## Adding the sidecar to your own chart[\s\S]*?```yaml\n([\s\S]*?)```/.exec(readme)?.[1]
  t.ok(snippet, 'the README has the snippet')
  const indented = snippet!.split('\n').map((l) => `  ${l}`).join('\n')
  const objects = renderParentPod(t, {}, `apiVersion: v1\nkind: Pod\nmetadata:\n  name: legacy\nspec:\n  containers:\n    - name: app\n      image: legacy:1\n${indented}\n`)
  t.equal(objects.length, 1)
  await validate(t, objects[0]!)
  const pod = objects[0]!.spec
  t.equal(pod.initContainers[0].name, 'auth-sidecar')
  t.same(pod.volumes, [{ name: 'auth-sidecar-credentials', secret: { secretName: 'my-credentials', defaultMode: 0o440 } }])
})

helmTest('helm lint passes with the CI values; the defaults alone are refused by the schema', async (t) => {
  const lint = spawnSync(helm, ['lint', chart, '-f', `${chart}/ci/test-values.yaml`], { encoding: 'utf8' })
  t.equal(lint.status, 0, lint.stdout + lint.stderr)
  const bare = spawnSync(helm, ['template', 't', chart], { encoding: 'utf8' })
  t.not(bare.status, 0, 'no values: refused')
  t.match(bare.stderr, /values don't meet the specifications of the schema/)
})

/** The pod's settings that decide who can read the Secret's files. */
interface PodFacts { fsGroup: number | undefined, runAsUser: number, runAsGroup: number, defaultMode: number }

function podFacts (): PodFacts {
  if (helmMissing === undefined) {
    const pod = render().find((o) => o.kind === 'Deployment')!.spec.template.spec
    const sidecar = [...(pod.initContainers ?? []), ...pod.containers].find((c: { name: string }) => c.name === 'auth-sidecar')
    const volume = pod.volumes.find((v: { name: string }) => v.name === 'auth-sidecar-credentials')
    return { fsGroup: pod.securityContext?.fsGroup, runAsUser: sidecar.securityContext.runAsUser, runAsGroup: sidecar.securityContext.runAsGroup, defaultMode: volume.secret.defaultMode }
  }
  // Without Helm: the same facts from the values and the volume template.
  const values = parse(readFileSync(`${chart}/values.yaml`, 'utf8')) as { podSecurityContext: { fsGroup?: number }, sidecar: { securityContext: { runAsUser: number, runAsGroup: number } } }
  const mode = /defaultMode: (0\d+)/.exec(readFileSync(`${chart}/templates/_helpers.tpl`, 'utf8'))![1]!
  return { fsGroup: values.podSecurityContext.fsGroup, runAsUser: values.sidecar.securityContext.runAsUser, runAsGroup: values.sidecar.securityContext.runAsGroup, defaultMode: parseInt(mode, 8) }
}

/**
 * Mounts the credentials as the kubelet does (files owned by root; with an
 * fsGroup, group-owned by it and group-readable) and runs `node dist/main.js
 * check` as the container's user, with fsGroup as its supplementary group.
 * Returns the check's first line.
 */
function readAsContainer (t: Test, facts: PodFacts): string {
  // In /tmp, with a copy of the bundle: the clone itself may sit under a
  // directory the container's user cannot enter (/root, say).
  const dir = mkdtempSync(join(tmpdir(), 'auth-sidecar-mount-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  chmodSync(dir, 0o755)
  mkdirSync(join(dir, 'dist'), { mode: 0o755 })
  copyFileSync(main, join(dir, 'dist', 'main.js'))
  cpSync(join(dirname(main), 'chunks'), join(dir, 'dist', 'chunks'), { recursive: true })
  copyFileSync(`${root}package.json`, join(dir, 'package.json'))
  const secrets = join(dir, 'secrets')
  mkdirSync(secrets, { mode: 0o755 })
  for (const [name, value] of [['username', 'service-user'], ['password', 'pw'], ['client-secret', 'cs']]) {
    const file = join(secrets, name)
    writeFileSync(file, value)
    chownSync(file, 0, facts.fsGroup ?? 0)
    chmodSync(file, facts.fsGroup === undefined ? facts.defaultMode : facts.defaultMode | 0o440)
  }
  const result = spawnSync('setpriv', [
    `--reuid=${facts.runAsUser}`, `--regid=${facts.runAsGroup}`,
    ...(facts.fsGroup === undefined ? ['--clear-groups'] : [`--groups=${facts.fsGroup}`]),
    process.execPath, join(dir, 'dist', 'main.js'), 'check'
  ], {
    cwd: dir,
    encoding: 'utf8',
    env: {
      PATH: process.env.PATH ?? '',
      BASE_URL: 'http://127.0.0.1:9/api',
      AUTH_TOKEN_URL: 'http://127.0.0.1:9/token',
      AUTH_CLIENT_ID: 'legacy-app',
      AUTH_USERNAME_FILE: join(secrets, 'username'),
      AUTH_PASSWORD_FILE: join(secrets, 'password'),
      AUTH_CLIENT_SECRET_FILE: join(secrets, 'client-secret'),
      TOKEN_TIMEOUT_MS: '500'
    }
  })
  return `${result.stdout}${result.stderr}`.split('\n')[0]!
}

const asRoot = process.getuid?.() === 0
const setpriv = spawnSync('setpriv', ['--version']).status === 0
/** node itself must be reachable by the container's user (not under /root/.nvm, say) */
const nodeRunsAs65532 = asRoot && setpriv && spawnSync('setpriv', ['--reuid=65532', '--regid=65532', '--clear-groups', process.execPath, '--version']).status === 0

t.test('the sidecar container can read its credential files as the chart mounts them (non-root, read-only)', {
  skip: !asRoot || !setpriv
    ? 'needs root and setpriv to play the kubelet and the container user'
    : nodeRunsAs65532 ? false : `${process.execPath} cannot be run by uid 65532 here`
}, async (t) => {
  const facts = podFacts()
  t.equal(facts.runAsUser, 65532)
  t.not(facts.runAsUser, 0, 'not root')
  const first = readAsContainer(t, facts)
  t.match(first, /^ok {3}configuration:/, `the configuration (three credential files) is read: ${first}`)
  t.notMatch(first, /EACCES/)

  // the same mount without fsGroup is the crash loop this guards against
  const without = readAsContainer(t, { ...facts, fsGroup: undefined })
  t.match(without, /^FAIL configuration: AUTH_USERNAME_FILE cannot be read \(EACCES\)/, 'without fsGroup: EACCES, as reported')
})
