import { SIDECAR_RESOURCES } from './defaults.js'
import { quantityValue } from './quantity.js'

/** The annotations a pod opts in and configures its sidecar with. */
export const ANNOTATIONS = {
  inject: 'auth-sidecar.io/inject',
  status: 'auth-sidecar.io/status',
  config: 'auth-sidecar.io/config',
  secret: 'auth-sidecar.io/secret',
  native: 'auth-sidecar.io/native',
  mode: 'auth-sidecar.io/mode',
  forwardCa: 'auth-sidecar.io/forward-ca',
  cpuRequest: 'auth-sidecar.io/cpu-request',
  cpuLimit: 'auth-sidecar.io/cpu-limit',
  memoryRequest: 'auth-sidecar.io/memory-request',
  memoryLimit: 'auth-sidecar.io/memory-limit'
} as const

/** The status annotation's value once the patch is applied. */
export const INJECTED = 'injected'

export interface Resources {
  requests: Partial<Record<'cpu' | 'memory', string>>
  limits: Partial<Record<'cpu' | 'memory', string>>
}

/** What a pod's annotations ask for. */
export interface InjectOptions {
  configMap: string
  secret: string | undefined
  native: boolean
  forward: { caSecret: string } | undefined
  resources: Resources
}

export type Decision =
  | { inject: false, why: 'not_annotated' | 'already_injected' }
  | { inject: false, why: 'invalid', problems: string[] }
  | { inject: true, options: InjectOptions }

/** An object name as Kubernetes takes it for a ConfigMap or Secret: a DNS subdomain (RFC 1123). */
const OBJECT_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/

/**
 * Whether to inject, and how, from the pod's annotations. Every problem is
 * reported at once, naming the annotation; a pod with one is not injected.
 */
export function decide (annotations: Record<string, string> | undefined): Decision {
  const a = annotations ?? {}
  if (a[ANNOTATIONS.inject] !== 'true') return { inject: false, why: 'not_annotated' }
  if (a[ANNOTATIONS.status] === INJECTED) return { inject: false, why: 'already_injected' }
  const problems: string[] = []

  const objectName = (key: string, kind: string, what: string, required: boolean): string | undefined => {
    const value = a[key]
    if (value === undefined || value === '') {
      if (required) problems.push(`${key} is required: the ${kind} ${what}`)
      return undefined
    }
    if (value.length > 253 || !OBJECT_NAME.test(value)) problems.push(`${key} must name a ${kind} (lower-case letters, digits, - and .)`)
    return value
  }
  const choice = <T extends string>(key: string, allowed: readonly T[], fallback: T): T => {
    const value = a[key]
    if (value === undefined) return fallback
    if (!(allowed as readonly string[]).includes(value)) problems.push(`${key} must be ${allowed.map((v) => `"${v}"`).join(' or ')}`)
    return value as T
  }

  const configMap = objectName(ANNOTATIONS.config, 'ConfigMap', 'holding the sidecar\'s config.yaml', true)
  const secret = objectName(ANNOTATIONS.secret, 'Secret', 'with the sidecar\'s files', false)
  const native = choice(ANNOTATIONS.native, ['true', 'false'], 'true') === 'true'
  const mode = choice(ANNOTATIONS.mode, ['reverse', 'forward'], 'reverse')
  const caSecret = objectName(ANNOTATIONS.forwardCa, 'Secret', 'with the forward proxy\'s CA (tls.crt, tls.key)', mode === 'forward')
  if (mode !== 'forward' && caSecret !== undefined) problems.push(`${ANNOTATIONS.forwardCa} is set without ${ANNOTATIONS.mode}: forward`)
  const resources = resourcesOf(a, problems)

  if (problems.length > 0) return { inject: false, why: 'invalid', problems }
  return { inject: true, options: { configMap: configMap!, secret, native, forward: mode === 'forward' ? { caSecret: caSecret! } : undefined, resources } }
}

/**
 * The sidecar's resources: the defaults, each overridden by its annotation.
 * A limit below the default request lowers that request to it (as
 * Kubernetes does when only a limit is given); below a request the
 * annotations set, it is a problem: the API server would refuse the pod.
 */
function resourcesOf (a: Record<string, string>, problems: string[]): Resources {
  const resources: Resources = { requests: { ...SIDECAR_RESOURCES.requests }, limits: { ...SIDECAR_RESOURCES.limits } }
  for (const resource of ['cpu', 'memory'] as const) {
    const requestKey = resource === 'cpu' ? ANNOTATIONS.cpuRequest : ANNOTATIONS.memoryRequest
    const limitKey = resource === 'cpu' ? ANNOTATIONS.cpuLimit : ANNOTATIONS.memoryLimit
    const given = (key: string): string | undefined => {
      const value = a[key]
      if (value === undefined) return undefined
      if (quantityValue(value) === undefined) {
        problems.push(`${key} must be a Kubernetes quantity (e.g. ${resource === 'cpu' ? '100m or 0.5' : '128Mi or 1Gi'})`)
        return undefined
      }
      return value
    }
    const request = given(requestKey)
    const limit = given(limitKey)
    if (request !== undefined) resources.requests[resource] = request
    if (limit !== undefined) resources.limits[resource] = limit
    const r = resources.requests[resource]
    const l = resources.limits[resource]
    if (r === undefined || l === undefined || quantityValue(r)! <= quantityValue(l)!) continue
    if (request !== undefined) problems.push(`${requestKey} (${r}) is above ${limit !== undefined ? limitKey : `the default ${resource} limit`} (${l})`)
    else resources.requests[resource] = l
  }
  return resources
}
