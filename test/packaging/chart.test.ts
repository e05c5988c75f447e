import { readdirSync, readFileSync } from 'node:fs'
import { Ajv } from 'ajv'
import t from 'tap'
import { parse } from 'yaml'
import { properties } from '../../src/config/schema.js'
import { root } from '../helpers/process.js'

const chart = `${root}helm/auth-sidecar/`
const schema = JSON.parse(readFileSync(`${chart}values.schema.json`, 'utf8')) as object
const values = parse(readFileSync(`${chart}values.yaml`, 'utf8')) as Record<string, any>
const ciValues = parse(readFileSync(`${chart}ci/test-values.yaml`, 'utf8')) as Record<string, any>
const templates = Object.fromEntries(readdirSync(`${chart}templates`).map((f) => [f, readFileSync(`${chart}templates/${f}`, 'utf8')]))

/** Helm's merge of user values over the defaults (maps merged, lists replaced). */
function merge (base: any, over: any): any {
  if (typeof base !== 'object' || base === null || Array.isArray(base) || typeof over !== 'object' || over === null || Array.isArray(over)) return over
  const out = { ...base }
  for (const [k, v] of Object.entries(over)) out[k] = k in base ? merge(base[k], v) : v
  return out
}

const validate = new Ajv({ allErrors: true, strict: false }).compile(schema)

t.test('the CI values, merged over the defaults, satisfy the schema', async (t) => {
  const ok = validate(merge(values, ciValues))
  t.equal(ok, true, JSON.stringify(validate.errors))
})

t.test('the defaults alone are refused, naming what must be set', async (t) => {
  t.equal(validate(values), false)
  const paths = (validate.errors ?? []).map((e) => e.instancePath)
  t.ok(paths.includes('/app/image/repository'), 'the application image')
  t.ok(paths.includes('/sidecar/env/BASE_URL'), 'the upstream')
})

t.test('the schema covers every value, each with a description, and refuses unknown ones', async (t) => {
  const walk = (node: any, s: any, path: string): void => {
    t.ok(s !== undefined, `${path} is in the schema`)
    if (s === undefined) return
    t.ok(typeof s.description === 'string' && s.description.length > 0, `${path} has a description`)
    if (typeof node === 'object' && node !== null && !Array.isArray(node) && s.properties !== undefined) {
      t.equal(s.additionalProperties, false, `${path} refuses unknown keys`)
      for (const [k, v] of Object.entries(node)) walk(v, s.properties[k], `${path}.${k}`)
    }
  }
  walk(values, { ...(schema as any), description: 'root' }, 'values')
  t.equal(validate(merge(merge(values, ciValues), { sidecar: { typo: 1 } })), false, 'a misspelt key is refused')
})

t.test('sidecar.env has every setting of the configuration schema, with the same defaults', async (t) => {
  // the files of credentials and certificates the chart mounts itself, and the forward proxy (its `forwardProxy` values)
  const credentialVariables = /^AUTH_(USERNAME|PASSWORD|CLIENT_SECRET)(_FILE)?$|^AUTH_CLIENT_(KEY|ASSERTION)_FILE$|^(UPSTREAM|AUTH)_TLS_(CERT|KEY|CA)_FILE$|^FORWARD_PROXY_/
  const expected = Object.entries(properties).filter(([name]) => !credentialVariables.test(name))
  t.same(Object.keys(values.sidecar.env).sort(), expected.map(([name]) => name).sort())
  for (const [name, p] of expected) {
    t.equal(values.sidecar.env[name], (p as { default?: unknown }).default ?? '', `${name} default`)
  }
})

t.test('sidecar.env takes every value the configuration takes: the same choices, and the types the variables have', async (t) => {
  const env = (schema as any).properties.sidecar.properties.env.properties as Record<string, { type?: string, enum?: string[] }>
  for (const [name, p] of Object.entries(properties) as Array<[string, { type: string, enum?: readonly string[] }]>) {
    const chartSide = env[name]
    if (chartSide === undefined) continue
    if (p.enum !== undefined) t.same(chartSide.enum?.filter((v) => v !== ''), p.enum, `${name}: the choices of the configuration`)
    if (p.type === 'boolean' || p.type === 'integer') t.equal(chartSide.type, p.type, `${name} is ${p.type === 'integer' ? 'an integer' : 'a boolean'}`)
  }
  const tls = merge(merge(values, ciValues), { sidecar: { env: { AUTH_CLIENT_AUTH: 'tls_client_auth' } } })
  t.equal(validate(tls), true, `the certificate setup can be installed: ${JSON.stringify(validate.errors)}`)
})

t.test('templates: native sidecar with a startup probe, files from the Secret, locked-down pod, named templates', async (t) => {
  const helpers = templates['_helpers.tpl']!
  const deployment = templates['deployment.yaml']!
  t.match(helpers, /define "auth-sidecar\.container"/, 'a named template other charts can include')
  t.match(helpers, /define "auth-sidecar\.volume"/)
  t.match(helpers, /restartPolicy: Always/)
  t.match(helpers, /startupProbe:\s+httpGet:\s+path: \/readyz/)
  t.match(helpers, /livenessProbe:\s+httpGet:\s+path: \/healthz/)
  t.match(helpers, /path: \{\{ if \.followToken \}\}\/readyz\{\{ else \}\}\/healthz\{\{ end \}\}/, 'readiness policy')
  t.match(helpers, /AUTH_PASSWORD_FILE/)
  t.notMatch(helpers, /subPath:/, 'no subPath: a rotated Secret reaches the files')
  t.match(helpers, /trunc 63/)
  t.match(deployment, /initContainers:[\s\S]*auth-sidecar\.thisContainer/)
  t.match(deployment, /if not \.Values\.sidecar\.native[\s\S]*auth-sidecar\.thisContainer/, 'classic sidecar for older clusters')
  t.match(templates['secret.yaml']!, /not \.Values\.credentials\.existingSecret/)
  t.match(templates['servicemonitor.yaml']!, /kind: ServiceMonitor/)
  t.ok(templates['NOTES.txt'])
  const sc = values.sidecar.securityContext
  t.match(sc, { runAsNonRoot: true, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] }, seccompProfile: { type: 'RuntimeDefault' } })
  t.same(values.sidecar.resources, {}, 'resources left to the user')
})

t.test('the memory figures of the chart\'s README and values are those of docs/performance.md', async (t) => {
  const performance = readFileSync(`${root}docs/performance.md`, 'utf8')
  const row = performance.split('\n').find((l) => l.startsWith('| **auth-sidecar** |'))!.split('|').map((c) => c.replace(/\*/g, '').trim())
  const [idle, load] = [row.at(-3), row.at(-2)]
  t.match(idle, /^\d+$/)
  t.match(load, /^\d+$/)
  for (const [name, text] of [['README.md', readFileSync(`${chart}README.md`, 'utf8')], ['values.yaml', readFileSync(`${chart}values.yaml`, 'utf8')]]) {
    const flat = text.replace(/\s+/g, ' ')
    t.match(flat, `idled at ${idle} MB`, `${name}: idle ${idle} MB`)
    t.match(flat, `held ${load} MB under load`, `${name}: ${load} MB under load`)
  }
})
