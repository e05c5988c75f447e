import { collectDefaultMetrics, Counter, Gauge, Registry, type Metric } from 'prom-client'
import type { GrantType } from '../token/grant.js'
import type { GrantOutcome } from '../token/manager.js'
import { OneLabelHistogram } from './histogram.js'

export interface Metrics {
  registry: Registry
  grant(grant: GrantType, outcome: GrantOutcome): void
  request(status: number, seconds: number): void
}

const PREFIX = 'auth_sidecar_'

/** The sidecar's Prometheus metrics (SPEC §5); no label ever carries a secret. */
export function createMetrics (expiresInSeconds: () => number, ready: () => boolean): Metrics {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry, prefix: PREFIX })

  const grants = new Counter({
    name: `${PREFIX}token_grants_total`,
    help: 'Token grant requests by grant type and outcome (success, rejected, error).',
    labelNames: ['grant_type', 'outcome'] as const,
    registers: [registry]
  })
  new Gauge({
    name: `${PREFIX}token_expires_in_seconds`,
    help: 'Seconds until the held access token expires (0 without one).',
    registers: [registry],
    collect () { this.set(expiresInSeconds()) }
  })
  new Gauge({
    name: `${PREFIX}ready`,
    help: '1 while a valid token is held (readiness), else 0.',
    registers: [registry],
    collect () { this.set(ready() ? 1 : 0) }
  })
  const requests = new OneLabelHistogram(
    `${PREFIX}proxy_request_duration_seconds`,
    'Proxied requests by response status, with their duration in seconds.',
    'status',
    [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]
  )
  registry.registerMetric(requests as unknown as Metric)

  return {
    registry,
    grant: (grant, outcome) => grants.inc({ grant_type: grant, outcome }),
    request: (status, seconds) => requests.observe(status, seconds)
  }
}
