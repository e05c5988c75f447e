import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { TracingSettings } from '../config/load.js'

/** trace_id and span_id, as log lines carry them */
export interface TraceIds {
  trace_id: string
  span_id: string
}

/**
 * A traced request's SERVER span. Tracing off, requests carry none
 * (`request.sidecarTrace` is undefined) and the proxy does nothing more.
 */
export interface RequestTrace {
  readonly ids: TraceIds
  /**
   * A CLIENT span for one try sent upstream (`resendCount` 0 for the
   * first), when the request's trace is sampled; an unsampled request's
   * tries share its SERVER span's context and record nothing. Its `headers`
   * go with the try, replacing the client's traceparent and tracestate, so
   * that the upstream's spans are its children.
   */
  upstream(method: string, url: URLParts, resendCount: number): UpstreamSpan
  /** The request waited for a token: a link to the grant that ended the wait. */
  waitedFor(credential: object): void
  /** The sidecar answered with one of its own errors (`token_unavailable`, `upstream_timeout`...). */
  failed(errorType: string): void
  /** The request is answered (the handshake switched, for a WebSocket): the span ends with `status`. */
  end(status: number): void
}

/** Where a request goes, without its query: a span never holds one. */
export interface URLParts {
  /** `scheme://host[:port]` */
  origin: string
  path: string
}

export interface UpstreamSpan {
  /** traceparent (and tracestate, when there is one) for the try's headers */
  readonly headers: Readonly<Record<string, string>>
  /** The try is over: with the upstream's final status, or `errorType` (what failed) without one. */
  end(status: number | undefined, errorType?: string): void
}

/** What a grant's requests to the auth server are traced by: the grant's span, handed down to them. */
export interface GrantTrace {
  /** `fetch` with a CLIENT span for each request, a child of the grant's, whose traceparent it sends. */
  traced<F extends Fetch>(fetch: F): F
}

/** One grant's INTERNAL span. */
export interface GrantSpan extends GrantTrace {
  /** `outcome`: success, rejected or error; `oauthError`: the auth server's `error` code, for a refusal. */
  end(outcome: string, oauthError?: string): void
}

/** An HTTP client as oauth4webapi's `customFetch` takes it. */
export type Fetch = (url: string, init: { method: string, headers: Record<string, string>, body?: unknown, signal?: AbortSignal | undefined }) => Promise<Response>

/**
 * What the sidecar does for tracing, chosen at start: NO_TRACING, unless
 * OTEL_TRACES_EXPORTER names an exporter (otel.ts, loaded only then).
 */
export interface Tracing {
  readonly on: boolean
  /** Adds the hook that starts a SERVER span for each request a route took (`routeOf` names it; none when off); the listener's access log ends it. */
  instrumentRoute(app: FastifyInstance, routeOf: (request: FastifyRequest) => string | undefined): void
  /** An INTERNAL span for one grant of `credential` (the key the requests waiting for it link by). */
  grant(credential: object, route: string, grantType: string): GrantSpan
  /** The ids of `credential`'s latest grant, for its token log lines. */
  grantIds(credential: object): TraceIds | undefined
  /**
   * Sends the spans still held, and stops, waiting `withinMs` at most:
   * resolves false when the exporter had not finished by then.
   */
  shutdown(withinMs: number): Promise<boolean>
}

declare module 'fastify' {
  interface FastifyRequest {
    /** the request's SERVER span; undefined when tracing is off */
    sidecarTrace: RequestTrace | undefined
  }
}

/** A grant traced by nothing. */
export const NO_GRANT_SPAN: GrantSpan = {
  traced (fetch) { return fetch },
  end () {}
}

/** Tracing off: nothing is added to a request, a grant or a log line. */
export const NO_TRACING: Tracing = {
  on: false,
  instrumentRoute () {},
  grant () { return NO_GRANT_SPAN },
  grantIds () { return undefined },
  async shutdown () { return true }
}

/** The least time the spans still held get at shutdown, grace period over or not: a collector in the pod answers in milliseconds. */
export const FLUSH_MIN_MS = 1_000

/** What is kept free before the shutdown's backstop, for the last log lines and the exit. */
export const FLUSH_BACKSTOP_MARGIN_MS = 500

/**
 * How long tracing may take to send its last spans at shutdown, `elapsedMs`
 * after the signal: what is left of the grace period, or FLUSH_MIN_MS when
 * less is left (requests ran to its end, the session took its time), and
 * never into the last FLUSH_BACKSTOP_MARGIN_MS before the backstop kills
 * the process at `backstopMs`.
 */
export function flushBudgetMs (graceMs: number, backstopMs: number, elapsedMs: number): number {
  const wanted = Math.max(graceMs - elapsedMs, FLUSH_MIN_MS)
  return Math.max(0, Math.min(wanted, backstopMs - FLUSH_BACKSTOP_MARGIN_MS - elapsedMs))
}

let loaded = false

/** Whether the OpenTelemetry SDK was loaded in this process (tests: tracing off loads nothing). */
export function tracingLoaded (): boolean {
  return loaded
}

/**
 * The tracing of `settings`: NO_TRACING when off; else the SDK, imported
 * now and only now, so that a sidecar without tracing never loads it.
 */
export async function startTracing (settings: TracingSettings | undefined): Promise<Tracing> {
  if (settings === undefined) return NO_TRACING
  loaded = true
  const { startOtel } = await import('./otel.js')
  return startOtel({ ...(settings.serviceName !== undefined && { serviceName: settings.serviceName }) })
}
