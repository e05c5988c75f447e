import { execFileSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { parse, parseAllDocuments } from 'yaml'
import { root } from './process.js'

/**
 * The chart rendered by Helm (scripts/helm.mjs finds one), as the chart's
 * tests read it: its objects parsed as the API server parses them, and
 * checked against the Kubernetes schemas of kubernetes-models (the
 * Prometheus operator's objects against its CRDs' schemas).
 */
export const chart = `${root}helm/auth-sidecar`
const { findHelm } = await import(`${root}scripts/helm.mjs`) as { findHelm: () => { helm?: string, missing?: string } }
const found = findHelm()
export const helm = found.helm ?? 'helm'
/** why Helm cannot be run here; undefined when it can */
export const helmMissing = found.missing

/** A test that needs Helm: without it, a failure under CI=true and a skip saying why elsewhere. */
export function helmTest (name: string, fn: (t: Test) => Promise<void>): void {
  t.test(name, async (t) => {
    if (found.missing !== undefined) {
      if (process.env.CI === 'true') t.fail(found.missing)
      else t.plan(0, found.missing)
      return
    }
    await fn(t)
  })
}

export interface K8sObject { apiVersion: string, kind: string, metadata: { name: string }, spec?: any }

/** `helm template` of the chart with the CI values, then each `--set` and `--set-json`. */
export function helmArgs (set: string[], json: string[] = []): string[] {
  return ['template', 't', chart, '-f', `${chart}/ci/test-values.yaml`, ...set.flatMap((s) => ['--set', s]), ...json.flatMap((s) => ['--set-json', s])]
}

export function render (set: string[] = [], json: string[] = []): K8sObject[] {
  return parseManifests(execFileSync(helm, helmArgs(set, json), { encoding: 'utf8' }))
}

/** As the API server reads them: YAML 1.1, where `0440` is octal. */
export function parseManifests (text: string): K8sObject[] {
  return parseAllDocuments(text, { version: '1.1' }).map((d) => d.toJS() as K8sObject).filter((o) => o !== null)
}

/** kubernetes-models' class for an object's kind, which validates it against the OpenAPI schema. */
export async function validate (t: Test, object: K8sObject): Promise<void> {
  const [group, version] = object.apiVersion.includes('/') ? object.apiVersion.split('/') : ['', object.apiVersion]
  const path = group === '' ? 'kubernetes-models/v1' : group === 'monitoring.coreos.com' ? `@kubernetes-models/prometheus-operator/${group}/${version}` : `kubernetes-models/${group}/${version}`
  const models = await import(path) as Record<string, new (data: object) => { validate(): void }>
  const Model = models[object.kind]
  t.ok(Model, `${object.kind} is a ${object.apiVersion} kind`)
  t.doesNotThrow(() => new Model!(object).validate(), `${object.kind} ${object.metadata.name} is valid`)
}

/**
 * Another chart with this one as its dependency, as the chart's README
 * shows: `authSidecar` (this chart's `sidecar` values, with a route) and
 * `values` in its values, `podTemplate` its templates/pod.yaml. Returns
 * with the pod Helm renders from it.
 */
export function renderParentPod (t: Test, values: Record<string, unknown>, podTemplate: string): K8sObject[] {
  const parent = mkdtempSync(join(tmpdir(), 'auth-sidecar-parent-'))
  t.teardown(() => rmSync(parent, { recursive: true, force: true }))
  mkdirSync(join(parent, 'templates'))
  mkdirSync(join(parent, 'charts'))
  execFileSync('cp', ['-r', chart, join(parent, 'charts', 'auth-sidecar')])
  writeFileSync(join(parent, 'Chart.yaml'), 'apiVersion: v2\nname: legacy\nversion: 1.0.0\n')
  const sidecarValues = parse(readFileSync(`${chart}/values.yaml`, 'utf8')).sidecar
  writeFileSync(join(parent, 'values.yaml'), JSON.stringify({
    authSidecar: { ...sidecarValues, env: { ...sidecarValues.env, BASE_URL: 'https://api.example.com', AUTH_URL: 'https://sso.example.com', AUTH_CLIENT_ID: 'legacy-app' } },
    'auth-sidecar': parse(readFileSync(`${chart}/ci/test-values.yaml`, 'utf8')),
    ...values
  }))
  writeFileSync(join(parent, 'templates', 'pod.yaml'), podTemplate)
  return parseManifests(execFileSync(helm, ['template', 't', parent, '-s', 'templates/pod.yaml'], { encoding: 'utf8' }))
}
