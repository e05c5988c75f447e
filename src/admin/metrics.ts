import type { EventEmitter } from 'node:events'
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client'
import type { ShedReason } from '../connections.js'
import type { ForwardOutcome, ProxyEvents } from '../proxy/context.js'
import type { UpstreamErrorReason } from '../proxy/failures.js'
import { DPOP_REFUSALS } from '../token/challenge.js'
import type { Credential, GrantOutcome, LogoutOutcome } from '../token/credential.js'
import type { GrantType } from '../token/grant.js'
import { VERSION } from '../version.js'

export interface Metrics {
  registry: Registry
  /** counts a new version of the configuration file, applied or rejected */
  countReload(outcome: 'applied' | 'rejected'): void
  /**
   * Counts what happens to a credential, and reports its expiry and
   * readiness at each scrape, under the name of the route whose settings
   * define it.
   */
  /** returns what stops watching it (a credential a new configuration left out) */
  watchCredential(route: string, credential: Credential, options: { dpop: boolean }): () => void
  /**
   * Counts a route's upstream failures from 0 under its name; returns what
   * lets go of the name. Once no route and no credential watched under a
   * name holds it, every series labelled with it goes: a route removed
   * leaves none behind, while a changed one, watched anew before the one it
   * replaces lets go, keeps counting.
   */
  watchRoute(route: string): () => void
  /** Counts the proxy's answers and failures. */
  watchProxy(events: EventEmitter<ProxyEvents>): void
  /** Counts the forward proxy's connections by outcome (from 0, once it is on). */
  watchForwardProxy(events: EventEmitter<ProxyEvents>): void
  /** Reports a client certificate's expiry at each scrape: `certificate` is upstream or auth, `route` the route it serves; returns what stops reporting it. */
  watchCertificate(certificate: 'upstream' | 'auth', route: string, source: { readonly certificate: { notAfter: Date } | undefined }): () => void
  /** What counts the connections a listener (named by its port's variable) closed to stay within its bound, from 0. */
  countShed(listener: string): (reason: ShedReason) => void
}

const PREFIX = 'auth_sidecar_'
const GRANT_TYPES: readonly GrantType[] = ['password', 'client_credentials', 'refresh_token', 'token_exchange']
const LOGOUT_OUTCOMES: readonly LogoutOutcome[] = ['success', 'rejected', 'error', 'skipped']
const OUTCOMES: readonly GrantOutcome[] = ['success', 'rejected', 'error']
const FORWARD_OUTCOMES: readonly ForwardOutcome[] = ['intercepted', 'tunnelled', 'refused']
const UPSTREAM_ERROR_REASONS: readonly UpstreamErrorReason[] = ['unreachable', 'timeout', 'reset']
const SHED_REASONS: readonly ShedReason[] = ['idle', 'full']

/**
 * The sidecar's Prometheus metrics, fed by the events of the credentials and
 * the proxy; no label ever carries a secret. Each series has a `route`
 * label: the route that served, for the requests and the upstream's
 * failures; the route whose settings define the credential, for the grants,
 * the expiry, the sessions' end and refused DPoP proofs. Node's process metrics keep
 * their conventional names (process_cpu_seconds_total,
 * nodejs_heap_size_used_bytes, ...) so that stock dashboards find them, and
 * every failure series exists at 0 from the first scrape, so that an alert on
 * it has data before the first failure.
 */
export function createMetrics (routes: string[]): Metrics {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })
  const credentials: Array<{ route: string, credential: Credential }> = []
  /** how many routes and credentials are watched under each route label */
  const holders = new Map<string, number>()
  /** the statuses answered, for taking a route's request series out */
  const statuses = new Set<number>()

  const grants = new Counter({
    name: `${PREFIX}token_grants_total`,
    help: 'Token grant requests by grant type and outcome (success, rejected, error).',
    labelNames: ['grant_type', 'outcome', 'route'] as const,
    registers: [registry]
  })
  const upstreamErrors = new Counter({
    name: `${PREFIX}upstream_errors_total`,
    help: 'The sidecar\'s own 502 and 504 answers, by reason: unreachable (refused, unresolvable, connect timeout, an invalid answer), timeout (no response headers in time), reset (the connection closed under the request).',
    labelNames: ['reason', 'route'] as const,
    registers: [registry]
  })
  for (const route of routes) for (const reason of UPSTREAM_ERROR_REASONS) upstreamErrors.inc({ reason, route }, 0)
  const logouts = new Counter({
    name: `${PREFIX}logouts_total`,
    help: 'Sessions ended at the auth server on shutdown (AUTH_LOGOUT_ON_SHUTDOWN), by outcome: success, rejected (the server refused, e.g. the session had already ended), error (unreachable, timeout, no such endpoint), skipped (no session or no endpoint to end it at).',
    labelNames: ['outcome', 'route'] as const,
    registers: [registry]
  })
  const dpopRefusals = new Counter({
    name: `${PREFIX}dpop_proofs_refused_total`,
    help: 'DPoP proofs the upstream refused (a 401 with a DPoP error), by reason: use_dpop_nonce (it wants a nonce; the request is sent once more with it when it has no body), invalid_dpop_proof.',
    labelNames: ['reason', 'route'] as const,
    registers: [registry]
  })
  new Gauge({
    name: `${PREFIX}build_info`,
    help: 'Always 1; the version in its label.',
    labelNames: ['version'] as const,
    registers: [registry]
  }).set({ version: VERSION }, 1)
  new Gauge({
    name: `${PREFIX}token_expires_in_seconds`,
    help: 'Seconds until the held access token expires (0 without one).',
    labelNames: ['route'] as const,
    registers: [registry],
    collect () {
      this.reset()
      for (const { route, credential } of credentials) this.set({ route }, credential.expiresInSeconds())
    }
  })
  new Gauge({
    name: `${PREFIX}ready`,
    help: '1 while every route holds a valid token (readiness), else 0.',
    registers: [registry],
    collect () { this.set(credentials.every(({ credential }) => credential.ready()) ? 1 : 0) }
  })
  const certificates: Array<{ labels: { certificate: string, route: string }, source: { readonly certificate: { notAfter: Date } | undefined } }> = []
  new Gauge({
    name: `${PREFIX}certificate_expiry_timestamp_seconds`,
    help: 'When each client certificate in use expires (its notAfter, seconds since the epoch), by certificate (upstream, auth) and route: an alert fires before a failed renewal bites.',
    labelNames: ['certificate', 'route'] as const,
    registers: [registry],
    collect () {
      // a certificate no longer watched (its route removed) leaves no series behind
      this.reset()
      for (const { labels, source } of certificates) {
        const notAfter = source.certificate?.notAfter
        if (notAfter !== undefined) this.set(labels, notAfter.getTime() / 1000)
      }
    }
  })
  const reloads = new Counter({
    name: `${PREFIX}config_reloads_total`,
    help: 'New versions of the configuration (CONFIG_FILE changed, or SIGHUP) by outcome: applied, or rejected (the running configuration kept whole).',
    labelNames: ['outcome'] as const,
    registers: [registry]
  })
  for (const outcome of ['applied', 'rejected'] as const) reloads.inc({ outcome }, 0)
  const shed = new Counter({
    name: `${PREFIX}connections_shed_total`,
    help: 'Client connections closed to keep a listener within its bound (PROXY_MAX_CONNECTIONS, ADMIN_MAX_CONNECTIONS), by listener and reason: idle (the oldest idle one, for a new one), full (the new one, every place being busy).',
    labelNames: ['listener', 'reason'] as const,
    registers: [registry]
  })
  const requests = new Histogram({
    name: `${PREFIX}proxy_request_duration_seconds`,
    help: 'Proxied requests by response status, with their duration in seconds.',
    labelNames: ['status', 'route'] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry]
  })

  /**
   * the route names let go: what a removed route's connections and
   * credential report after it retired (a WebSocket session's access line
   * once its client answers the close, a tunnel ended late, a session's
   * end) would bring its series back for good
   */
  const released = new Set<string>()

  /** Holds `route`'s label; the last hold let go takes every series carrying it. */
  const hold = (route: string): () => void => {
    holders.set(route, (holders.get(route) ?? 0) + 1)
    released.delete(route)
    let held = true
    return () => {
      if (!held) return
      held = false
      const left = holders.get(route)! - 1
      if (left > 0) {
        holders.set(route, left)
        return
      }
      holders.delete(route)
      released.add(route)
      for (const reason of UPSTREAM_ERROR_REASONS) upstreamErrors.remove({ reason, route })
      for (const status of statuses) requests.remove({ status, route })
      for (const grantType of GRANT_TYPES) for (const outcome of OUTCOMES) grants.remove({ grant_type: grantType, outcome, route })
      for (const outcome of LOGOUT_OUTCOMES) logouts.remove({ outcome, route })
      for (const reason of DPOP_REFUSALS) dpopRefusals.remove({ reason, route })
    }
  }

  return {
    registry,
    countReload: (outcome) => reloads.inc({ outcome }),
    watchCredential (route, credential, { dpop }) {
      const watched = { route, credential }
      credentials.push(watched)
      const unhold = hold(route)
      for (const grantType of GRANT_TYPES) for (const outcome of OUTCOMES) grants.inc({ grant_type: grantType, outcome, route }, 0)
      for (const outcome of LOGOUT_OUTCOMES) logouts.inc({ outcome, route }, 0)
      if (dpop) for (const reason of DPOP_REFUSALS) dpopRefusals.inc({ reason, route }, 0)
      // a credential stopped still ends its session: not counted once its label is let go, so that it brings no series back
      credential.events.on('grant', (grant, outcome) => { if (!released.has(route)) grants.inc({ grant_type: grant, outcome, route }) })
      credential.events.on('logout', (outcome) => { if (!released.has(route)) logouts.inc({ outcome, route }) })
      credential.events.on('dpop_refused', (reason) => { if (!released.has(route)) dpopRefusals.inc({ reason, route }) })
      const remove = removal(credentials, watched)
      return () => {
        remove()
        unhold()
      }
    },
    watchRoute (route) {
      for (const reason of UPSTREAM_ERROR_REASONS) upstreamErrors.inc({ reason, route }, 0)
      return hold(route)
    },
    watchCertificate (certificate, route, source) {
      const watched = { labels: { certificate, route }, source }
      certificates.push(watched)
      return removal(certificates, watched)
    },
    countShed (listener) {
      for (const reason of SHED_REASONS) shed.inc({ listener, reason }, 0)
      return (reason) => shed.inc({ listener, reason })
    },
    watchProxy (events) {
      events.on('response', (line) => {
        if (released.has(line.route)) return
        statuses.add(line.status)
        requests.observe({ status: line.status, route: line.route }, line.durationMs / 1000)
      })
      events.on('upstream_error', ({ reason, route }) => { if (!released.has(route)) upstreamErrors.inc({ reason, route }) })
    },
    watchForwardProxy (events) {
      const connections = new Counter({
        name: `${PREFIX}forward_connections_total`,
        help: 'What the forward proxy did with each CONNECT and each request for a destination no route has, one outcome each: intercepted (TLS terminated, a route\'s credential added), tunnelled (allowed, passed untouched, whether the destination answered or not; a failure is also in upstream_errors_total), refused.',
        labelNames: ['outcome'] as const,
        registers: [registry]
      })
      for (const outcome of FORWARD_OUTCOMES) connections.inc({ outcome }, 0)
      // what the forward proxy passes on untouched fails under its label for no route, `-`
      for (const reason of UPSTREAM_ERROR_REASONS) upstreamErrors.inc({ reason, route: '-' }, 0)
      events.on('forward_connection', (outcome) => connections.inc({ outcome }))
    }
  }
}

/** What takes `item` out of `list`: a second call takes nothing else. */
function removal<T> (list: T[], item: T): () => void {
  return () => {
    const at = list.indexOf(item)
    if (at !== -1) list.splice(at, 1)
  }
}
