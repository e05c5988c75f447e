import type { Pod } from './pod.js'

export const ADMISSION_API_VERSION = 'admission.k8s.io/v1'

/** The request of an AdmissionReview for a Pod, as far as the webhook reads it. */
export interface PodAdmission {
  uid: string
  operation: string
  namespace: string | undefined
  pod: Pod
}

/** A body that is not an AdmissionReview for a Pod; the message says which field, never its content. */
export class ReviewError extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'ReviewError'
  }
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v)

/**
 * Checks that `body` is an `admission.k8s.io/v1` AdmissionReview whose
 * request is for a core v1 Pod, with a uid to answer and, for CREATE, the
 * Pod itself; throws a ReviewError otherwise.
 */
export function podAdmission (body: unknown): PodAdmission {
  if (!isObject(body)) throw new ReviewError('the body is not a JSON object')
  if (body.apiVersion !== ADMISSION_API_VERSION || body.kind !== 'AdmissionReview') throw new ReviewError(`not an AdmissionReview of ${ADMISSION_API_VERSION}`)
  const request = body.request
  if (!isObject(request)) throw new ReviewError('the AdmissionReview has no request')
  if (typeof request.uid !== 'string' || request.uid === '') throw new ReviewError('request.uid is missing')
  // the API server's uids are UUIDs: anything far longer is no review of its own
  if (request.uid.length > 128) throw new ReviewError('request.uid is longer than 128 characters')
  const kind = request.kind
  if (!isObject(kind) || kind.group !== '' || kind.version !== 'v1' || kind.kind !== 'Pod') throw new ReviewError('request.kind is not a core v1 Pod')
  if (request.subResource !== undefined && request.subResource !== '') throw new ReviewError('request is for a subresource of a Pod, not a Pod')
  if (typeof request.operation !== 'string') throw new ReviewError('request.operation is missing')
  const object = request.object
  if (request.operation === 'CREATE' && (!isObject(object) || !isObject(object.spec) || !Array.isArray(object.spec.containers))) {
    throw new ReviewError('request.object is not a Pod with spec.containers')
  }
  if (isObject(object)) podShape(object)
  return {
    uid: request.uid,
    operation: request.operation,
    namespace: typeof request.namespace === 'string' ? request.namespace : undefined,
    pod: (isObject(object) ? object : {}) as Pod
  }
}

/** The answer: always allowed; with a patch where there is one. */
export function admissionResponse (uid: string, patch: unknown[] | undefined, warnings: string[]): object {
  return {
    apiVersion: ADMISSION_API_VERSION,
    kind: 'AdmissionReview',
    response: {
      uid,
      allowed: true,
      ...(patch !== undefined && { patchType: 'JSONPatch', patch: Buffer.from(JSON.stringify(patch)).toString('base64') }),
      ...(warnings.length > 0 && { warnings })
    }
  }
}

const isArrayOf = (v: unknown): boolean => Array.isArray(v) && v.every(isObject)

/**
 * The fields the webhook reads have their types: the API server decodes a
 * Pod before it calls, but the body could come from anyone who reaches the port.
 */
function podShape (pod: Record<string, unknown>): void {
  const metadata = pod.metadata
  if (metadata !== undefined) {
    if (!isObject(metadata)) throw new ReviewError('request.object.metadata is not an object')
    const annotations = metadata.annotations
    if (annotations !== undefined && (!isObject(annotations) || !Object.values(annotations).every((v) => typeof v === 'string'))) {
      throw new ReviewError('request.object.metadata.annotations is not a map of strings')
    }
  }
  const spec = pod.spec
  if (spec === undefined) return
  if (!isObject(spec)) throw new ReviewError('request.object.spec is not an object')
  if (spec.volumes !== undefined && !isArrayOf(spec.volumes)) throw new ReviewError('request.object.spec.volumes is not a list of objects')
  for (const field of ['containers', 'initContainers'] as const) {
    const list = spec[field]
    if (list === undefined) continue
    if (!isArrayOf(list)) throw new ReviewError(`request.object.spec.${field} is not a list of objects`)
    for (const c of list as Array<Record<string, unknown>>) {
      if (typeof c.name !== 'string') throw new ReviewError(`a container of request.object.spec.${field} has no name`)
      for (const inner of ['env', 'volumeMounts', 'ports']) {
        if (c[inner] !== undefined && !isArrayOf(c[inner])) throw new ReviewError(`request.object.spec.${field}[].${inner} is not a list of objects`)
      }
    }
  }
}
