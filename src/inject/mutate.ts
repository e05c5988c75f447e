import { decide } from './annotations.js'
import { buildPatch } from './patch.js'
import { admissionResponse, podAdmission } from './review.js'

/** What one review came to, for the log line. */
export interface Outcome {
  uid: string
  namespace: string | undefined
  /** the pod's name, or the prefix the API server will name it from */
  pod: string | undefined
  injected: boolean
  /** why not: not_annotated, already_injected, not_create, invalid */
  reason?: string
  warnings?: string[]
}

/**
 * An AdmissionReview's answer. A pod that opted in but cannot be injected
 * as its annotations say (a bad value, a container already named
 * auth-sidecar) is allowed unchanged, with warnings naming the annotation:
 * the webhook never blocks a pod, and a half-understood request is not
 * guessed at. Throws a ReviewError for a body that is not a Pod's review.
 */
export function mutate (body: unknown, image: string): { response: object, outcome: Outcome } {
  const review = podAdmission(body)
  const meta = review.pod.metadata
  const base = { uid: review.uid, namespace: review.namespace ?? meta?.namespace, pod: meta?.name ?? (meta?.generateName === undefined ? undefined : `${meta.generateName}*`) }
  const unchanged = (reason: string, warnings: string[] = []): { response: object, outcome: Outcome } =>
    ({ response: admissionResponse(review.uid, undefined, warnings), outcome: { ...base, injected: false, reason, ...(warnings.length > 0 && { warnings }) } })

  if (review.operation !== 'CREATE') return unchanged('not_create')
  const decision = decide(meta?.annotations)
  if (!decision.inject) {
    if (decision.why !== 'invalid') return unchanged(decision.why)
    return unchanged('invalid', decision.problems.map((p) => `auth-sidecar not injected: ${p}`))
  }
  const result = buildPatch(review.pod, decision.options, image)
  if ('problems' in result) return unchanged('invalid', result.problems.map((p) => `auth-sidecar not injected: ${p}`))
  return {
    response: admissionResponse(review.uid, result.operations, result.warnings),
    outcome: { ...base, injected: true, ...(result.warnings.length > 0 && { warnings: result.warnings }) }
  }
}
