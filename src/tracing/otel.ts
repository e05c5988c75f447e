import { propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type ContextManager, type HrTime, type Span, type SpanContext, type Tracer } from '@opentelemetry/api'
import { NodeSDK } from '@opentelemetry/sdk-node'
import type { SpanProcessor } from '@opentelemetry/sdk-trace-base'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { VERSION } from '../version.js'
import type { Fetch, GrantSpan, RequestTrace, TraceIds, Tracing, UpstreamSpan, URLParts } from './tracing.js'

export interface OtelOptions {
  serviceName?: string
  /** replaces the exporter OTEL_TRACES_EXPORTER names (tests: an in-memory one) */
  spanProcessors?: SpanProcessor[]
}

/**
 * The OpenTelemetry SDK, configured by the standard OTEL_* variables it
 * reads itself (exporter, sampler, propagators, resource), for traces only:
 * the sidecar's metrics are Prometheus's and its logs stdout's.
 */
export function startOtel (options: OtelOptions = {}): Tracing {
  const sdk = new NodeSDK({
    ...(options.serviceName !== undefined && { serviceName: options.serviceName }),
    ...(options.spanProcessors !== undefined && { spanProcessors: options.spanProcessors }),
    instrumentations: [],
    // None: every span's parent is given explicitly, and the default one's
    // AsyncLocalStorage turns on async hooks, which slow every request of
    // the process on Node 20 and 22 (null is the SDK's "register none").
    contextManager: null as unknown as ContextManager,
    metricReaders: [],
    logRecordProcessors: []
  })
  sdk.start()
  return new OtelTracing(trace.getTracer('auth-sidecar', VERSION), sdk)
}

class OtelTracing implements Tracing {
  readonly on = true
  readonly #tracer: Tracer
  readonly #sdk: NodeSDK
  /** each credential's latest grant span: requests that waited link to it, its log lines carry its ids */
  readonly #grants = new WeakMap<object, Span>()

  constructor (tracer: Tracer, sdk: NodeSDK) {
    this.#tracer = tracer
    this.#sdk = sdk
  }

  instrumentRoute (app: FastifyInstance, routeOf: (request: FastifyRequest) => string | undefined): void {
    const tracer = this.#tracer
    const grants = this.#grants
    // the listener's access log ends the span with its line's status (a WebSocket's handshake, at the switch)
    app.addHook('onRequest', (request, _reply, done) => {
      const route = routeOf(request)
      if (route !== undefined) request.sidecarTrace = requestTrace(tracer, grants, request, route)
      done()
    })
  }

  grant (credential: object, route: string, grantType: string): GrantSpan {
    // a grant is its own trace: a renewal on schedule serves every request that follows, not one
    const span = this.#tracer.startSpan(`grant ${grantType}`, {
      kind: SpanKind.INTERNAL,
      root: true,
      attributes: { 'auth_sidecar.route': route, 'auth_sidecar.grant_type': grantType }
    })
    this.#grants.set(credential, span)
    const tracer = this.#tracer
    return {
      traced: (fetch) => tracedFetch(tracer, span, fetch),
      end: (outcome, oauthError) => {
        span.setAttribute('auth_sidecar.outcome', outcome)
        if (oauthError !== undefined) span.setAttribute('auth_sidecar.oauth_error', oauthError)
        if (outcome !== 'success') span.setStatus({ code: SpanStatusCode.ERROR })
        span.end()
      }
    }
  }

  grantIds (credential: object): TraceIds | undefined {
    const span = this.#grants.get(credential)
    return span === undefined ? undefined : idsOf(span.spanContext())
  }

  async shutdown (withinMs: number): Promise<boolean> {
    // An exporter that cannot be reached says so through the SDK's own
    // diagnostics. One that never answers would hold the exit for its own
    // timeout (10 s by default): the wait ends at `withinMs`, and the export
    // still under way ends with the process.
    let timer: NodeJS.Timeout | undefined
    const late = new Promise<boolean>((resolve) => { timer = setTimeout(() => resolve(false), Math.max(0, withinMs)) })
    const sent = this.#sdk.shutdown().then(() => true, () => true)
    try {
      return await Promise.race([sent, late])
    } finally {
      clearTimeout(timer)
    }
  }
}

/**
 * A request's SERVER span, child of the client's traceparent when it sent
 * one: a RecordedRequest when its trace is sampled, else an
 * UnrecordedRequest, which only carries the trace on.
 */
function requestTrace (tracer: Tracer, grants: WeakMap<object, Span>, request: FastifyRequest, route: string): RequestTrace {
  const raw = request.raw
  const method = raw.method ?? 'GET'
  const parent = propagation.extract(ROOT_CONTEXT, raw.headers)
  // it began when the request arrived (the access log's clock), before the listener's hooks
  const span = tracer.startSpan(method, { kind: SpanKind.SERVER, startTime: hrTimeOf(TIME_ORIGIN + request.sidecarStarted) }, parent)
  if (!span.isRecording()) return new UnrecordedRequest(span.spanContext())
  // The samplers OTEL_TRACES_SAMPLER names decide by the trace id and the
  // parent alone, so the attributes are built only for a span that records.
  const local = raw.socket
  span.setAttributes({
    'http.request.method': method,
    'url.path': pathOf(raw.url ?? '/'),
    'url.scheme': (local as { encrypted?: boolean }).encrypted === true ? 'https' : 'http',
    'server.port': local.localPort ?? 0,
    'network.peer.address': local.remoteAddress ?? '',
    'auth_sidecar.route': route
  })
  return new RecordedRequest(tracer, grants, span)
}

/**
 * A request its trace does not sample records nothing: its tries carry
 * its SERVER span's context upstream, unsampled, rather than each starting
 * a CLIENT span that no one would ever see.
 */
class UnrecordedRequest implements RequestTrace {
  readonly ids: TraceIds
  readonly #context: SpanContext
  #try: UpstreamSpan | undefined

  constructor (context: SpanContext) {
    this.#context = context
    this.ids = idsOf(context)
  }

  upstream (): UpstreamSpan {
    return this.#try ??= { headers: traceHeaders(this.#context), end () {} }
  }

  waitedFor (): void {}
  failed (): void {}
  end (): void {}
}

class RecordedRequest implements RequestTrace {
  readonly ids: TraceIds
  readonly #span: Span
  readonly #grants: WeakMap<object, Span>
  readonly #tracer: Tracer
  /** the sidecar's own error, when it answered with one */
  #errorType: string | undefined
  #ended = false

  constructor (tracer: Tracer, grants: WeakMap<object, Span>, span: Span) {
    this.#tracer = tracer
    this.#grants = grants
    this.#span = span
    this.ids = idsOf(span.spanContext())
  }

  upstream (method: string, url: URLParts, resendCount: number): UpstreamSpan {
    const span = this.#tracer.startSpan(method, { kind: SpanKind.CLIENT, attributes: clientAttributes(method, url.origin, url.path, resendCount) }, trace.setSpan(ROOT_CONTEXT, this.#span))
    const headers = traceHeaders(span.spanContext())
    let ended = false
    return {
      headers,
      end (status, errorType) {
        if (ended) return
        ended = true
        if (status !== undefined) span.setAttribute('http.response.status_code', status)
        const failure = errorType ?? (status !== undefined && status >= 400 ? String(status) : undefined)
        if (failure !== undefined) {
          span.setAttribute('error.type', failure)
          span.setStatus({ code: SpanStatusCode.ERROR })
        }
        span.end()
      }
    }
  }

  waitedFor (credential: object): void {
    const grant = this.#grants.get(credential)
    if (grant !== undefined) this.#span.addLink({ context: grant.spanContext() })
  }

  failed (errorType: string): void {
    this.#errorType = errorType
  }

  end (status: number): void {
    if (this.#ended) return
    this.#ended = true
    this.#span.setAttribute('http.response.status_code', status)
    const failure = this.#errorType ?? (status >= 500 ? String(status) : undefined)
    if (failure !== undefined) this.#span.setAttribute('error.type', failure)
    // a server span is in error for a 5xx only: a 4xx is the client's
    if (status >= 500) this.#span.setStatus({ code: SpanStatusCode.ERROR })
    this.#span.end()
  }
}

/** The headers (traceparent, tracestate) that make the span of `context` the parent of what a try causes upstream. */
function traceHeaders (context: SpanContext): Record<string, string> {
  const headers: Record<string, string> = {}
  propagation.inject(trace.setSpanContext(ROOT_CONTEXT, context), headers)
  return headers
}

/** `fetch` with a CLIENT span for each request, a child of the grant's span, its traceparent sent. */
function tracedFetch<F extends Fetch> (tracer: Tracer, grant: Span, fetch: F): F {
  const parent = trace.setSpan(ROOT_CONTEXT, grant)
  const traced: Fetch = async (url, init) => {
    const { origin, pathname } = new URL(url)
    const span = tracer.startSpan(init.method, { kind: SpanKind.CLIENT, attributes: clientAttributes(init.method, origin, pathname, 0) }, parent)
    const headers = { ...init.headers, ...traceHeaders(span.spanContext()) }
    try {
      const res = await fetch(url, { ...init, headers })
      span.setAttribute('http.response.status_code', res.status)
      if (res.status >= 400) {
        span.setAttribute('error.type', String(res.status))
        span.setStatus({ code: SpanStatusCode.ERROR })
      }
      return res
    } catch (err) {
      span.setAttribute('error.type', errorType(err))
      span.setStatus({ code: SpanStatusCode.ERROR })
      throw err
    } finally {
      span.end()
    }
  }
  return traced as F
}

/**
 * The stable HTTP client attributes of a request to `origin` and `path`:
 * `url.full` is the two together, scheme, authority and path, never a query.
 */
function clientAttributes (method: string, origin: string, path: string, resendCount: number): Attributes {
  const attributes: Attributes = { 'http.request.method': method, ...serverAttributes(origin), 'url.full': origin + path, 'url.path': path }
  if (resendCount > 0) attributes['http.request.resend_count'] = resendCount
  return attributes
}

/**
 * The origins' attributes, parsed once each: the routes' upstreams and the
 * token endpoints, all from configuration or discovery, so a handful; the
 * cap keeps it small whatever a discovery document names.
 */
const origins = new Map<string, Attributes>()

function serverAttributes (origin: string): Attributes {
  const known = origins.get(origin)
  if (known !== undefined) return known
  const url = new URL(origin)
  const scheme = url.protocol.slice(0, -1)
  const attributes = {
    'server.address': url.hostname,
    'server.port': url.port === '' ? (scheme === 'https' ? 443 : 80) : Number(url.port),
    'url.scheme': scheme
  }
  if (origins.size < 64) origins.set(origin, attributes)
  return attributes
}

/** performance.now()'s zero in epoch milliseconds: it never changes, so it is read once. */
const TIME_ORIGIN = performance.timeOrigin

/**
 * Epoch milliseconds as [seconds, nanoseconds], to the microsecond: the
 * Zipkin exporter writes microseconds as they come, and Zipkin refuses a
 * batch with a fraction in one.
 */
function hrTimeOf (ms: number): HrTime {
  const seconds = Math.floor(ms / 1000)
  return [seconds, Math.min(999_999, Math.round((ms - seconds * 1000) * 1000)) * 1000]
}

function idsOf ({ traceId, spanId }: SpanContext): TraceIds {
  return { trace_id: traceId, span_id: spanId }
}

function pathOf (url: string): string {
  const q = url.indexOf('?')
  return q === -1 ? url : url.slice(0, q)
}

/** What failed, by its code (ECONNREFUSED, UND_ERR_HEADERS_TIMEOUT...), never its message. */
function errorType (err: unknown): string {
  const e = err as { code?: unknown, name?: unknown, cause?: { code?: unknown } }
  const code = e.code ?? e.cause?.code
  if (typeof code === 'string') return code
  return typeof e.name === 'string' ? e.name : '_OTHER'
}
