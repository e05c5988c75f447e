import { request } from 'node:https'
import { randomUUID } from 'node:crypto'
import fastJsonPatch from 'fast-json-patch'
import { Pod as PodModel } from 'kubernetes-models/v1'

/**
 * AdmissionReviews as the API server sends them to a mutating webhook for
 * a pod's CREATE, and what the tests do with the answer: the patch applied
 * by an RFC 6902 implementation nobody here wrote, the result checked
 * against the Pod schema of kubernetes-models.
 */

export type PodObject = Record<string, any>

/** A Deployment's pod as its ReplicaSet creates it: generateName, no name, the app's container. */
export function podOf (annotations: Record<string, string> | undefined, spec: Record<string, unknown> = {}): PodObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      generateName: 'orders-7d9f8c6b5-',
      namespace: 'shop',
      labels: { app: 'orders' },
      ...(annotations !== undefined && { annotations })
    },
    spec: {
      containers: [{ name: 'app', image: 'ghcr.io/example/orders:1.0', ports: [{ containerPort: 3000, protocol: 'TCP' }] }],
      restartPolicy: 'Always',
      ...spec
    }
  }
}

/** The AdmissionReview of `pod`'s creation in its namespace. */
export function reviewOf (pod: PodObject, overrides: Record<string, unknown> = {}): Record<string, any> {
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: randomUUID(),
      kind: { group: '', version: 'v1', kind: 'Pod' },
      resource: { group: '', version: 'v1', resource: 'pods' },
      requestKind: { group: '', version: 'v1', kind: 'Pod' },
      requestResource: { group: '', version: 'v1', resource: 'pods' },
      name: '',
      namespace: pod.metadata?.namespace ?? 'default',
      operation: 'CREATE',
      userInfo: { username: 'system:serviceaccount:kube-system:replicaset-controller', uid: randomUUID(), groups: ['system:serviceaccounts', 'system:authenticated'] },
      object: pod,
      oldObject: null,
      dryRun: false,
      options: { apiVersion: 'meta.k8s.io/v1', kind: 'CreateOptions' },
      ...overrides
    }
  }
}

/** The decoded patch of an AdmissionReview's response; undefined when it has none. */
export function patchOf (review: { response: { patch?: string, patchType?: string } }): any[] | undefined {
  if (review.response.patch === undefined) return undefined
  return JSON.parse(Buffer.from(review.response.patch, 'base64').toString('utf8'))
}

/** `pod` with `operations` applied, every operation checked first (an invalid one throws); `pod` itself untouched. */
export function applyPatch (pod: PodObject, operations: any[]): PodObject {
  return fastJsonPatch.applyPatch(structuredClone(pod), operations, true, false).newDocument
}

/** Throws when `pod` is not a valid v1 Pod. */
export function validatePod (pod: PodObject): void {
  new PodModel(pod as ConstructorParameters<typeof PodModel>[0]).validate()
}

/** A request over HTTPS trusting only `ca`: status, headers and body as text. */
export async function httpsRequest (url: string, ca: string, o: { method?: string, headers?: Record<string, string>, body?: string | Buffer } = {}): Promise<{ status: number, body: string, peerCertificate: string }> {
  return await new Promise((resolve, reject) => {
    const req = request(url, { method: o.method ?? 'GET', headers: o.headers, ca, agent: false }, (res) => {
      const chunks: Buffer[] = []
      const peer = (res.socket as import('node:tls').TLSSocket).getPeerCertificate()
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks).toString('utf8'), peerCertificate: peer.fingerprint256 }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(o.body)
  })
}
