import { DEFAULT_ADMIN_PORT, DEFAULT_PROXY_PORT } from '../config/schema.js'

/**
 * What the webhook puts into a pod when its annotations say nothing else:
 * the sidecar's resources, ports, security context and the paths of what is
 * mounted. The names and paths are the chart's, so that a configuration
 * written for one works with the other.
 */

/**
 * The injected sidecar's requests and limits; the annotations
 * `auth-sidecar.io/{cpu,memory}-{request,limit}` override each. No CPU
 * limit: a throttled sidecar delays every request of the application.
 */
export const SIDECAR_RESOURCES = {
  requests: { cpu: '50m', memory: '128Mi' },
  limits: { memory: '256Mi' }
} as const satisfies { requests: Record<'cpu' | 'memory', string>, limits: Partial<Record<'cpu' | 'memory', string>> }

/** The ports tried first; each moves up to the next free one when the pod already uses it. */
export const PROXY_PORT = DEFAULT_PROXY_PORT
export const ADMIN_PORT = DEFAULT_ADMIN_PORT
/** the chart's forwardProxy.port */
export const FORWARD_PROXY_PORT = 3128

export const CONTAINER_NAME = 'auth-sidecar'
/** the admin port's name in the sidecar's ports, as the chart names it (a PodMonitor can select it) */
export const ADMIN_PORT_NAME = 'sidecar-admin'

/** The ConfigMap's directory, and the key in it that is the configuration file. */
export const CONFIG_DIR = '/etc/auth-sidecar/config'
export const CONFIG_KEY = 'config.yaml'
/** The Secret's directory: a configuration names its files here (AUTH_CLIENT_SECRET_FILE: /var/run/secrets/auth-sidecar/client-secret). */
export const SECRET_DIR = '/var/run/secrets/auth-sidecar'
/** The forward proxy's CA, whole, in the sidecar; cert-manager's key names. */
export const FORWARD_CA_DIR = '/var/run/secrets/auth-sidecar-forward-ca'
export const FORWARD_CA_CERT_KEY = 'tls.crt'
export const FORWARD_CA_KEY_KEY = 'tls.key'
/** The CA's certificate alone, in the application's containers. */
export const FORWARD_BUNDLE_DIR = '/etc/auth-sidecar-forward-ca'
export const FORWARD_BUNDLE_FILE = `${FORWARD_BUNDLE_DIR}/ca.crt`

export const VOLUMES = {
  config: 'auth-sidecar-config',
  secret: 'auth-sidecar-secret',
  forwardCa: 'auth-sidecar-forward-ca',
  forwardBundle: 'auth-sidecar-forward-ca-bundle'
} as const

/** The chart's sidecar security context: not root, nothing written, no capability. */
export const SECURITY_CONTEXT = {
  runAsNonRoot: true,
  runAsUser: 65532,
  runAsGroup: 65532,
  readOnlyRootFilesystem: true,
  allowPrivilegeEscalation: false,
  capabilities: { drop: ['ALL'] },
  seccompProfile: { type: 'RuntimeDefault' }
} as const

/** The startup probe waits this long for the first token (the chart's sidecar.startupTimeoutSeconds). */
export const STARTUP_TIMEOUT_SECONDS = 300

/** What the application reaches directly, not through the forward proxy: loopback, the cluster's names, cloud metadata. */
export const NO_PROXY = 'localhost,127.0.0.1,::1,.svc,.svc.cluster.local,.cluster.local,169.254.169.254'
/** The variables that name the CA bundle for the common runtimes (OpenSSL and so Python, Ruby, PHP, Go; Node; requests; curl). */
export const CA_BUNDLE_VARIABLES = ['SSL_CERT_FILE', 'NODE_EXTRA_CA_CERTS', 'REQUESTS_CA_BUNDLE', 'CURL_CA_BUNDLE'] as const
