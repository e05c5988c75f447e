import type { EventEmitter } from 'node:events'
import type { Dispatcher } from 'undici'
import type { Connector } from '../connector.js'
import type { Logger } from '../logger.js'
import type { RequestCredential } from '../token/credential.js'
import type { AccessLine } from './access-log.js'
import type { Admission } from './admission.js'
import type { UpstreamErrorReason } from './failures.js'
import type { UpstreamSlots } from './upstream-slots.js'

/** One route as the proxy serves it. */
export interface RouteSettings {
  /** `default`, or the route's name in lower case */
  name: string
  /** `scheme://host[:port]` of its BASE_URL, the only origin its token is ever sent to */
  origin: string
  /** the origin's `host[:port]`, for the Host header */
  host: string
  /** its BASE_URL's path without the trailing slash, '' for none */
  basePath: string
  /** the path prefix it is served under on its listener ('' for all paths), removed before forwarding */
  prefix: string
  /** UPSTREAM_TIMEOUT_MS */
  timeoutMs: number
  /** WEBSOCKET_MAX_MESSAGE_BYTES */
  websocketMaxMessageBytes: number
}

export interface UpstreamError {
  route: string
  reason: UpstreamErrorReason
  /** what failed, as undici or Node named it (ECONNREFUSED, UND_ERR_HEADERS_TIMEOUT...) */
  code: string
}

/** What happens in the proxy, for whoever counts or shows it (the access log, the metrics, `check`). */
export interface ProxyEvents {
  /** one per request, answered or abandoned, and one per WebSocket session when it ends */
  response: [line: AccessLine]
  /** the sidecar answered 502 or 504 itself, or cut an answer the upstream broke off */
  upstream_error: [error: UpstreamError]
  /** the forward proxy took a CONNECT, or a request for a destination no route has */
  forward_connection: [outcome: ForwardOutcome]
}

/** intercepted: TLS terminated for a route's origin; tunnelled: an allowed destination, passed untouched; refused: neither */
export type ForwardOutcome = 'intercepted' | 'tunnelled' | 'refused'

/** Connections to the upstream that present one client certificate (or none): undici's pool, and its connector, which a WebSocket handshake takes too. */
export interface UpstreamConnection {
  dispatcher: Dispatcher
  connect: Connector
}

/**
 * A route's connections to its upstream, TLS verified: each request takes
 * the connections whose client certificate matches its token's (a
 * certificate-bound token goes only where that certificate is presented).
 */
export interface UpstreamConnections {
  /** the connections for a token obtained with `certificate`; undefined when that certificate's are closed (the token is stale) */
  connectionFor(certificate: string | undefined): UpstreamConnection | undefined
  /** whether connections presenting `certificate` are open */
  presents(certificate: string): boolean
  /** the thumbprint of the certificate new connections present; undefined for none */
  readonly certificate: string | undefined
  /** why the client certificate cannot be presented now (expired, not yet valid); undefined when it can, or there is none */
  unusable(): string | undefined
  /** the subject of the client certificate presented, for messages */
  readonly subject: string | undefined
  /** the upstream's refusal of the client certificate (its TLS alert's code), when one came just now */
  refusal(): string | undefined
}

/** What a route's parts share: its settings, credential, upstream pool, and the listener's bounds. */
export interface ProxyContext {
  route: RouteSettings
  credential: RequestCredential
  upstream: UpstreamConnections
  slots: UpstreamSlots
  admission: Admission
  log: Logger
  events: EventEmitter<ProxyEvents>
}
