/**
 * Header rules of the proxy, one set for HTTP requests and WebSocket
 * handshakes alike, on Node's flat `rawHeaders`.
 */

/**
 * Request headers never forwarded as the client sent them: hop-by-hop
 * headers (RFC 9110 §7.6.1), the client's own credentials, and those the
 * sidecar sets itself.
 */
const DROP_REQUEST = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect',
  'host', 'authorization', 'proxy-authorization', 'dpop',
  'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-request-id',
  // IIS and some frameworks route by these instead of the path
  'x-original-url', 'x-rewrite-url'
])

/** A WebSocket handshake's own headers, which the WebSocket client to the upstream writes itself. */
const HANDSHAKE = new Set(['sec-websocket-key', 'sec-websocket-version', 'sec-websocket-protocol', 'sec-websocket-extensions', 'content-length'])

/** Headers a `Connection` header may not name: dropping them would change how the request is framed or routed. */
const FRAMING = new Set(['content-length', 'transfer-encoding', 'host'])

/**
 * Whether the request's headers must be refused before anything is
 * forwarded: two `Host` headers (which one would the upstream
 * believe?), or a `Connection` header naming a framing header, which a proxy
 * that honours it would drop (a POST whose body then vanishes).
 */
export function hasAmbiguousHeaders (raw: string[], connection: string | undefined): boolean {
  if (connection !== undefined) {
    const named = namedIn(connection, undefined)
    if (named !== undefined) for (const name of named) if (FRAMING.has(name)) return true
  }
  return countHeader(raw, 'host') > 1
}

/** How often the header `name` (lower case) appears in a flat rawHeaders list. */
export function countHeader (raw: string[], name: string): number {
  let n = 0
  for (let i = 0; i < raw.length; i += 2) {
    const h = raw[i]!
    if (h.length === name.length && h.toLowerCase() === name) n++
  }
  return n
}

/** Hop-by-hop headers of the upstream's answer, which concern only that connection. */
const DROP_RESPONSE = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'trailer', 'te'])

/** What the sidecar adds to every forwarded request. */
export interface ForwardingInfo {
  authorization: string
  /** the DPoP proof, for DPoP-bound tokens */
  dpop: string | undefined
  /** the upstream's `host[:port]`; undefined where the client to the upstream writes it (WebSockets) */
  host: string | undefined
  requestId: string
  clientIp: string | undefined
  /** the body is not forwarded (a GET or HEAD's, which Fastify does not read): its length is not announced */
  withoutBody: boolean
  /** a WebSocket handshake: its own headers are the WebSocket client's to write */
  handshake: boolean
  /** the scheme the client used: https inside a connection the forward proxy intercepted */
  proto: 'http' | 'https'
  /** with tracing on, the try's trace context: it replaces the client's, tracestate included */
  trace?: Readonly<Record<string, string>> | undefined
}

/** The scheme a client spoke: https on a connection whose TLS the sidecar terminated (the forward proxy's). */
export function schemeOf (socket: object | null): 'http' | 'https' {
  return (socket as { encrypted?: boolean } | null)?.encrypted === true ? 'https' : 'http'
}

/** Header values as undici and Node's HTTP client take them. */
export type OutgoingHeaders = Record<string, string | string[]>

/** Request ids from the client are kept when they look like ids. */
export const REQUEST_ID = /^[\w\-.:@/+=]{1,128}$/

/**
 * The headers of the request sent upstream, from the client's: without
 * hop-by-hop headers and whatever the client's `Connection` names (so that
 * `Connection: authorization` cannot remove what is set here), with the
 * sidecar's Authorization, DPoP proof, Host and X-Forwarded-* headers.
 */
export function forwardedHeaders (raw: string[], info: ForwardingInfo): OutgoingHeaders {
  let named: Set<string> | undefined
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]!.length === 10 && raw[i]!.toLowerCase() === 'connection') named = namedIn(raw[i + 1]!, named)
  }
  const out: OutgoingHeaders = {}
  let clientHost: string | undefined
  let forwardedFor: string | undefined
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase()
    const value = raw[i + 1]!
    if (DROP_REQUEST.has(name)) {
      if (name === 'host') clientHost ??= value
      else if (name === 'x-forwarded-for') forwardedFor = forwardedFor === undefined ? value : `${forwardedFor}, ${value}`
      continue
    }
    if (named?.has(name) === true || (info.handshake && HANDSHAKE.has(name)) || (info.withoutBody && name === 'content-length')) continue
    if (info.trace !== undefined && (name === 'tracestate' || Object.hasOwn(info.trace, name))) continue
    add(out, name, value)
  }
  if (info.host !== undefined) out.host = info.host
  out.authorization = info.authorization
  if (info.dpop !== undefined) out.dpop = info.dpop
  out['x-forwarded-proto'] = info.proto
  out['x-request-id'] = info.requestId
  if (info.clientIp !== undefined) out['x-forwarded-for'] = forwardedFor === undefined ? info.clientIp : `${forwardedFor}, ${info.clientIp}`
  if (clientHost !== undefined) out['x-forwarded-host'] = clientHost
  if (info.trace !== undefined) Object.assign(out, info.trace)
  return out
}

/** Hop-by-hop request headers, and those an untouched request never carries: a proxy's credentials, `Expect` (answered by the proxy). */
const DROP_UNTOUCHED = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect', 'host', 'proxy-authorization'])

/**
 * The headers of a request the forward proxy passes on without a credential:
 * the client's own less hop-by-hop headers, whatever its `Connection` names
 * and `Proxy-Authorization`, with `host`. Its `Authorization` goes to a
 * destination the client chose, never to a route's origin (`ownAuthorization` false).
 */
export function untouchedHeaders (raw: string[], host: string, ownAuthorization: boolean): OutgoingHeaders {
  let named: Set<string> | undefined
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]!.toLowerCase() === 'connection') named = namedIn(raw[i + 1]!, named)
  }
  const out: OutgoingHeaders = { host }
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase()
    if (DROP_UNTOUCHED.has(name) || named?.has(name) === true || (!ownAuthorization && (name === 'authorization' || name === 'dpop'))) continue
    add(out, name, raw[i + 1]!)
  }
  return out
}

/**
 * Adds a header the client sent to `out`, after any of the same name. A
 * name is only ever an own property: `constructor` is a header like any
 * other, and `__proto__`, which would set the object's prototype, is none.
 */
function add (out: OutgoingHeaders, name: string, value: string): void {
  if (name === '__proto__') return
  const before = Object.hasOwn(out, name) ? out[name] : undefined
  out[name] = before === undefined ? value : Array.isArray(before) ? [...before, value] : [before, value]
}

/** Header values as Node and undici hand over an answer's. */
export type IncomingHeaders = Record<string, string | string[] | undefined>

/**
 * The upstream's response headers as relayed to the client: without
 * hop-by-hop headers or those its `Connection` names, with the request id.
 */
export function relayedResponseHeaders (headers: IncomingHeaders, requestId: string): OutgoingHeaders {
  const connection = headers.connection
  const named = connection === undefined ? undefined : namedIn(String(connection), undefined)
  const out: OutgoingHeaders = {}
  for (const name in headers) {
    const value = headers[name]
    if (value === undefined || DROP_RESPONSE.has(name) || name === 'x-request-id' || named?.has(name) === true || name === '__proto__') continue
    out[name] = value
  }
  out['x-request-id'] = requestId
  return out
}

/**
 * The header names a `Connection` value lists (RFC 9110 §7.6.1), added to
 * `into`; its `close` and `keep-alive` options name no header.
 */
function namedIn (value: string, into: Set<string> | undefined): Set<string> | undefined {
  // what nearly every peer sends names nothing: no split on each request
  if (value.length <= 10) {
    const only = value.toLowerCase()
    if (only === 'keep-alive' || only === 'close') return into
  }
  for (const token of value.split(',')) {
    const name = token.trim().toLowerCase()
    if (name !== '' && name !== 'close' && name !== 'keep-alive') (into ??= new Set()).add(name)
  }
  return into
}
