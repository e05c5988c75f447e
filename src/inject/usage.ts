import { INJECT_VARIABLES } from '../config/inject.js'
import { ANNOTATIONS } from './annotations.js'

/** `inject --help`. */
export function injectUsage (): string {
  const width = Math.max(...INJECT_VARIABLES.map((v) => v.name.length))
  const rows = INJECT_VARIABLES.map((v) => `  ${v.name.padEnd(width)}  ${v.description}${v.default !== undefined ? ` (default ${v.default})` : ' (required)'}`)
  return `auth-sidecar inject: a Kubernetes mutating admission webhook (admission.k8s.io/v1)
that adds the auth-sidecar to pods annotated ${ANNOTATIONS.inject}: "true".

Usage:
  node dist/main.js inject           serve POST /mutate, GET /healthz and /readyz over HTTPS
  node dist/main.js inject --help    this text

Configuration (environment variables):
${rows.join('\n')}

Annotations of a pod (the webhook sets ${ANNOTATIONS.status}: injected):
${Object.values(ANNOTATIONS).filter((a) => a !== ANNOTATIONS.status).map((a) => `  ${a}`).join('\n')}
More: docs/kubernetes.md (Injection), the chart's injector values.
`
}
