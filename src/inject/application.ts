import { CA_BUNDLE_VARIABLES, FORWARD_BUNDLE_DIR, FORWARD_BUNDLE_FILE, NO_PROXY, VOLUMES } from './defaults.js'
import type { Container, EnvVar, VolumeMount } from './pod.js'

/** What one application container is given, as additions and the values it already had that change. */
export interface ApplicationChanges {
  env: EnvVar[]
  /** an entry of its env whose value becomes another (NO_PROXY, ours before its own) */
  envValues: Array<{ index: number, value: string }>
  volumeMounts: VolumeMount[]
  warnings: string[]
}

/**
 * The variables an application container gets: API_URL, and in forward
 * mode the proxy variables, NO_PROXY and the CA bundle's. A variable the
 * container already sets is its own and is kept (Kubernetes takes the last
 * of two entries, so an added one would win); NO_PROXY is the exception:
 * its entries are kept after the cluster's, so that what it already reaches
 * directly it still does. Both cases are written: curl reads only the
 * lower-case http_proxy.
 */
export function applicationChanges (c: Container, proxyPort: number, forwardPort: number | undefined): ApplicationChanges {
  const env = c.env ?? []
  const last = (name: string): number => env.findLastIndex((e) => e.name === name)
  const changes: ApplicationChanges = { env: [], envValues: [], volumeMounts: [], warnings: [] }
  const add = (name: string, value: string): void => {
    if (last(name) === -1) changes.env.push({ name, value })
  }
  add('API_URL', `http://localhost:${proxyPort}`)
  if (forwardPort === undefined) return changes

  const proxy = `http://127.0.0.1:${forwardPort}`
  for (const name of ['HTTPS_PROXY', 'HTTP_PROXY', 'https_proxy', 'http_proxy']) add(name, proxy)
  for (const name of ['NO_PROXY', 'no_proxy']) {
    const at = last(name)
    if (at === -1) changes.env.push({ name, value: NO_PROXY })
    else if (typeof env[at]!.value === 'string' && env[at]!.value !== '') changes.envValues.push({ index: at, value: `${NO_PROXY},${env[at]!.value!}` })
    else if (env[at]!.valueFrom !== undefined) changes.warnings.push(`container ${c.name}: its ${name} comes from valueFrom and is kept as it is; add ${NO_PROXY} to it`)
    else changes.envValues.push({ index: at, value: NO_PROXY })
  }
  for (const name of CA_BUNDLE_VARIABLES) add(name, FORWARD_BUNDLE_FILE)
  if ((c.volumeMounts ?? []).some((m) => m.mountPath === FORWARD_BUNDLE_DIR)) {
    changes.warnings.push(`container ${c.name} already mounts ${FORWARD_BUNDLE_DIR}: the forward proxy's CA is not mounted into it`)
  } else {
    changes.volumeMounts.push({ name: VOLUMES.forwardBundle, mountPath: FORWARD_BUNDLE_DIR, readOnly: true })
  }
  return changes
}
