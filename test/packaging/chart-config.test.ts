import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parse } from 'yaml'
import { loadConfig } from '../../src/config/load.js'
import { helmTest, render, validate, type K8sObject } from '../helpers/helm.js'

const CONFIG = {
  UPSTREAM_TIMEOUT_MS: 5000,
  routes: { reports: { BASE_URL: 'https://reports.example.com', PATH: '/reports', AUTH_EXCHANGE_AUDIENCE: 'reports-api' } }
}

function sidecarOf (objects: K8sObject[]): any {
  const pod = objects.find((o) => o.kind === 'Deployment')!.spec.template.spec
  return { pod, container: [...(pod.initContainers ?? []), ...pod.containers].find((c: { name: string }) => c.name === 'auth-sidecar') }
}

helmTest('the chart\'s config value: a ConfigMap mounted whole, CONFIG_FILE naming its file, and a change that does not roll the pod', async (t) => {
  const objects = render([], [`config=${JSON.stringify(CONFIG)}`])
  for (const object of objects) await validate(t, object)
  const map = objects.find((o) => o.kind === 'ConfigMap') as K8sObject & { data: Record<string, string> }
  t.ok(map, 'a ConfigMap')
  const { pod, container } = sidecarOf(objects)
  const file = container.env.find((e: { name: string }) => e.name === 'CONFIG_FILE')?.value as string
  const mount = container.volumeMounts.find((m: { name: string }) => m.name === 'auth-sidecar-config')
  t.same([file, mount?.subPath, mount?.mountPath], ['/etc/auth-sidecar/config/config.yaml', undefined, '/etc/auth-sidecar/config'], 'no subPath: the kubelet\'s update reaches the file')
  t.same(pod.volumes.find((v: { name: string }) => v.name === 'auth-sidecar-config')?.configMap, { name: map.metadata.name })

  // the rendered file is one the sidecar takes, with the chart's environment beside it
  const dir = mkdtempSync(join(tmpdir(), 'chart-config-'))
  writeFileSync(join(dir, 'config.yaml'), map.data['config.yaml']!)
  const env = Object.fromEntries(container.env.filter((e: { value?: string }) => e.value !== undefined).map((e: { name: string, value: string }) => [e.name, e.value]))
  const config = loadConfig({ ...env, CONFIG_FILE: join(dir, 'config.yaml'), AUTH_PASSWORD_FILE: '', AUTH_USERNAME_FILE: '', AUTH_CLIENT_SECRET_FILE: '', AUTH_USERNAME: 'u', AUTH_PASSWORD: 'p', AUTH_CLIENT_SECRET: 's' }, { cwd: dir, parseYaml: parse })
  t.same([config.upstream.timeoutMs, config.routes.map((r) => r.name)], [5000, ['default', 'reports']])

  const changed = render([], [`config=${JSON.stringify({ ...CONFIG, UPSTREAM_TIMEOUT_MS: 9000 })}`])
  t.not(changed.find((o) => o.kind === 'ConfigMap')!, map, 'the ConfigMap changes')
  t.same(sidecarOf(changed).pod, pod, 'the pod template does not: no rollout')
  t.notOk(render().some((o) => o.kind === 'ConfigMap'), 'no ConfigMap without config')
  // a ConfigMap is no place for a secret
  t.throws(() => render([], ['config={"AUTH_PASSWORD":"in-clear-1"}']), 'a password in config is refused')
  t.throws(() => render([], ['config={"routes":{"r":{"BASE_URL":"https://r.example","PATH":"/r","AUTH_CLIENT_SECRET":"in-clear-2"}}}']), 'under a route too')
})
