import type { InjectOptions } from './annotations.js'
import {
  ADMIN_PORT_NAME, CONFIG_DIR, CONFIG_KEY, CONTAINER_NAME, FORWARD_CA_CERT_KEY, FORWARD_CA_DIR, FORWARD_CA_KEY_KEY,
  SECRET_DIR, SECURITY_CONTEXT, STARTUP_TIMEOUT_SECONDS, VOLUMES
} from './defaults.js'
import type { Container, EnvVar, Probe, Volume, VolumeMount } from './pod.js'

/** The sidecar's ports in one pod, chosen clear of the application's. */
export interface SidecarPorts {
  proxy: number
  admin: number
  /** with the forward proxy only */
  forward?: number | undefined
}

/**
 * The injected sidecar: the chart's container, configured by the mounted
 * ConfigMap (CONFIG_FILE) and Secret. The ports are set in the environment,
 * which wins over the file: the probes and the application's variables
 * depend on them. A native sidecar gets a startup probe on /readyz, so the
 * application starts once every route holds its token; a classic one none,
 * as in the chart (its probes would only hold back its own readiness).
 */
export function sidecarContainer (image: string, o: InjectOptions, ports: SidecarPorts, adminPortName: boolean): Container {
  const env: EnvVar[] = [
    { name: 'CONFIG_FILE', value: `${CONFIG_DIR}/${CONFIG_KEY}` },
    // the proxy stays on loopback: whoever reaches it is lent the pod's credentials
    { name: 'PROXY_HOST', value: '127.0.0.1' },
    { name: 'PROXY_PORT', value: String(ports.proxy) },
    // the kubelet probes the pod's address
    { name: 'ADMIN_HOST', value: '0.0.0.0' },
    { name: 'ADMIN_PORT', value: String(ports.admin) }
  ]
  const mounts: VolumeMount[] = [{ name: VOLUMES.config, mountPath: CONFIG_DIR, readOnly: true }]
  if (o.secret !== undefined) mounts.push({ name: VOLUMES.secret, mountPath: SECRET_DIR, readOnly: true })
  if (o.forward !== undefined) {
    env.push(
      { name: 'FORWARD_PROXY_PORT', value: String(ports.forward) },
      { name: 'FORWARD_PROXY_CA_CERT_FILE', value: `${FORWARD_CA_DIR}/${FORWARD_CA_CERT_KEY}` },
      { name: 'FORWARD_PROXY_CA_KEY_FILE', value: `${FORWARD_CA_DIR}/${FORWARD_CA_KEY_KEY}` }
    )
    mounts.push({ name: VOLUMES.forwardCa, mountPath: FORWARD_CA_DIR, readOnly: true })
  }
  const probe = (path: string, periodSeconds: number, failureThreshold: number): Probe =>
    ({ httpGet: { path, port: ports.admin }, periodSeconds, failureThreshold })
  return {
    name: CONTAINER_NAME,
    image,
    imagePullPolicy: 'IfNotPresent',
    ...(o.native && { restartPolicy: 'Always' }),
    ports: [{ ...(adminPortName && { name: ADMIN_PORT_NAME }), containerPort: ports.admin }],
    env,
    volumeMounts: mounts,
    ...(o.native && { startupProbe: probe('/readyz', 2, STARTUP_TIMEOUT_SECONDS / 2) }),
    livenessProbe: probe('/healthz', 10, 3),
    // the chart's default readiness: an auth-server outage does not take the pod out of its Services
    readinessProbe: probe('/healthz', 5, 2),
    resources: { requests: { ...o.resources.requests }, ...(Object.keys(o.resources.limits).length > 0 && { limits: { ...o.resources.limits } }) },
    securityContext: structuredClone(SECURITY_CONTEXT) as unknown as Record<string, unknown>
  }
}

/**
 * The volumes the sidecar mounts (the ConfigMap whole, no subPath, so that
 * an update reaches the file the sidecar re-reads), and the application's CA certificate in
 * forward mode (its one key, never the CA's private key). Files are mode
 * 0444: the pod may have no fsGroup that would let the sidecar's user read
 * 0440 files, and only the sidecar mounts the volumes that hold secrets.
 */
export function sidecarVolumes (o: InjectOptions): Volume[] {
  const volumes: Volume[] = [{ name: VOLUMES.config, configMap: { name: o.configMap } }]
  if (o.secret !== undefined) volumes.push({ name: VOLUMES.secret, secret: { secretName: o.secret, defaultMode: 0o444 } })
  if (o.forward !== undefined) {
    volumes.push(
      { name: VOLUMES.forwardCa, secret: { secretName: o.forward.caSecret, defaultMode: 0o444 } },
      { name: VOLUMES.forwardBundle, secret: { secretName: o.forward.caSecret, items: [{ key: FORWARD_CA_CERT_KEY, path: 'ca.crt' }], defaultMode: 0o444 } }
    )
  }
  return volumes
}
