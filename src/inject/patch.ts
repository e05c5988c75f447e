import { applicationChanges } from './application.js'
import { ANNOTATIONS, INJECTED, type InjectOptions } from './annotations.js'
import { ADMIN_PORT, ADMIN_PORT_NAME, CONTAINER_NAME, FORWARD_PROXY_PORT, PROXY_PORT, VOLUMES } from './defaults.js'
import { PatchBuilder, type Operation } from './json-patch.js'
import type { Container, Pod } from './pod.js'
import { freePort, usedPorts } from './ports.js'
import { sidecarContainer, sidecarVolumes, type SidecarPorts } from './sidecar.js'

export type PatchResult =
  | { operations: Operation[], ports: SidecarPorts, warnings: string[] }
  | { problems: string[] }

/**
 * The JSON Patch that injects the sidecar into `pod`: the sidecar first in
 * initContainers (native) or last in containers (classic), its volumes, the
 * application containers' variables, and the status annotation that makes
 * the next review of the same pod leave it alone.
 *
 * In forward mode the application containers get the proxy, and so do the
 * init containers of a native sidecar's pod: they start after it is ready.
 * A classic sidecar starts after every init container, so they get nothing.
 */
export function buildPatch (pod: Pod, o: InjectOptions, image: string): PatchResult {
  const spec = pod.spec ?? {}
  const containers = spec.containers ?? []
  const initContainers = spec.initContainers ?? []
  const problems: string[] = []
  if (spec.hostNetwork === true) problems.push('a pod on the host\'s network is not injected: the sidecar\'s ports would be the node\'s')
  if ([...containers, ...initContainers].some((c) => c.name === CONTAINER_NAME)) problems.push(`the pod already has a container named ${CONTAINER_NAME}`)
  const taken = Object.values(VOLUMES).filter((name) => (spec.volumes ?? []).some((v) => v.name === name))
  if (taken.length > 0) problems.push(`the pod already has a volume named ${taken.join(', ')}`)

  const used = usedPorts(pod)
  const proxy = freePort(PROXY_PORT, used)
  const admin = freePort(ADMIN_PORT, used)
  const forward = o.forward === undefined ? undefined : freePort(FORWARD_PROXY_PORT, used)
  if (proxy === undefined || admin === undefined || (o.forward !== undefined && forward === undefined)) problems.push('the pod uses every port: none is left for the sidecar')
  if (problems.length > 0) return { problems }
  const ports: SidecarPorts = { proxy: proxy!, admin: admin!, forward }

  const adminPortName = ![...containers, ...initContainers].some((c) => (c.ports ?? []).some((p) => p.name === ADMIN_PORT_NAME))
  const sidecar = sidecarContainer(image, o, ports, adminPortName)
  const patch = new PatchBuilder()
  const warnings: string[] = []
  const application = (c: Container, path: string): void => {
    const changes = applicationChanges(c, ports.proxy, ports.forward)
    patch.append(`${path}/env`, c.env, changes.env)
    for (const { index, value } of changes.envValues) patch.replace(`${path}/env/${index}/value`, value)
    patch.append(`${path}/volumeMounts`, c.volumeMounts, changes.volumeMounts)
    warnings.push(...changes.warnings)
  }

  // the application's containers first: their paths are those of the pod as it came
  containers.forEach((c, i) => { application(c, `/spec/containers/${i}`) })
  if (o.native && o.forward !== undefined) initContainers.forEach((c, i) => { application(c, `/spec/initContainers/${i}`) })
  if (o.native) patch.prepend('/spec/initContainers', spec.initContainers, sidecar)
  else patch.append('/spec/containers', spec.containers, [sidecar])
  patch.append('/spec/volumes', spec.volumes, sidecarVolumes(o))
  if (pod.metadata === undefined) patch.operations.push({ op: 'add', path: '/metadata', value: { annotations: { [ANNOTATIONS.status]: INJECTED } } })
  else patch.setKey('/metadata/annotations', pod.metadata.annotations, ANNOTATIONS.status, INJECTED)
  return { operations: patch.operations, ports, warnings }
}
