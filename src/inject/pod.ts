/**
 * The parts of a Pod the webhook reads and writes, as the API server sends
 * them: JSON, every field optional, so that nothing is assumed present.
 */

export interface EnvVar { name: string, value?: string, valueFrom?: unknown }
export interface VolumeMount { name: string, mountPath: string, readOnly?: boolean }
export interface ContainerPort { containerPort: number, name?: string, protocol?: string }
export interface Probe {
  httpGet?: { path?: string, port: number | string, scheme?: string }
  tcpSocket?: { port: number | string }
  grpc?: { port: number }
  [field: string]: unknown
}

export interface Container {
  name: string
  image?: string
  env?: EnvVar[]
  volumeMounts?: VolumeMount[]
  ports?: ContainerPort[]
  startupProbe?: Probe
  livenessProbe?: Probe
  readinessProbe?: Probe
  restartPolicy?: string
  [field: string]: unknown
}

export interface Volume { name: string, [source: string]: unknown }

export interface Pod {
  apiVersion?: string
  kind?: string
  metadata?: { name?: string, generateName?: string, namespace?: string, annotations?: Record<string, string>, [field: string]: unknown }
  spec?: {
    containers?: Container[]
    initContainers?: Container[]
    volumes?: Volume[]
    hostNetwork?: boolean
    [field: string]: unknown
  }
}
