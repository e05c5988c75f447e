import type { Container, Pod, Probe } from './pod.js'

/**
 * The ports the pod's containers already use: those they declare, and the
 * numbers their probes name (a port a probe reaches is open even when it is
 * not declared). Every container of a pod shares one network namespace, so
 * the sidecar must listen on none of them.
 */
export function usedPorts (pod: Pod): Set<number> {
  const used = new Set<number>()
  const containers: Container[] = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])]
  for (const c of containers) {
    for (const p of c.ports ?? []) if (Number.isInteger(p.containerPort)) used.add(p.containerPort)
    for (const probe of [c.startupProbe, c.livenessProbe, c.readinessProbe]) {
      for (const port of probePorts(probe)) used.add(port)
    }
  }
  return used
}

function probePorts (probe: Probe | undefined): number[] {
  if (probe === undefined) return []
  return [probe.httpGet?.port, probe.tcpSocket?.port, probe.grpc?.port].filter((p): p is number => typeof p === 'number')
}

/**
 * `preferred`, or the next port above it that `used` does not hold (from
 * 1024 again after 65535); the port is then added to `used`, so that the
 * sidecar's own ports differ too. Undefined when every port is taken.
 */
export function freePort (preferred: number, used: Set<number>): number | undefined {
  let port = preferred
  for (let tried = 0; used.has(port); tried++) {
    if (tried > 65535) return undefined
    port = port === 65535 ? 1024 : port + 1
  }
  used.add(port)
  return port
}
