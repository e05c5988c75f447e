/**
 * Header rules of the proxy: for HTTP on the header
 * objects @fastify/reply-from hands its hooks, for WebSocket handshakes on
 * Node's flat `rawHeaders`.
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
  /** the DPoP proof, in DPoP mode (WebSocket handshakes; HTTP requests get theirs from the upstream dispatcher) */
  dpop?: string
  /** the upstream's `host[:port]` */
  host: string
  requestId: string
  clientIp: string | undefined
}

/** Header values as Node and undici hold them. */
export type HeaderValues = Record<string, string | string[] | number | undefined>

/**
 * The headers of the request sent upstream, from @fastify/reply-from's copy
 * of the client's (`rewriteRequestHeaders`): reply-from has already removed
 * `Connection` and every header it names, so `Connection: authorization`
 * cannot remove what is set here.
 */
export function upstreamRequestHeaders (headers: HeaderValues, clientHost: string | undefined, info: ForwardingInfo): HeaderValues {
  const out: HeaderValues = {}
  for (const name in headers) {
    if (!DROP_REQUEST.has(name)) out[name] = headers[name]
  }
  out.host = info.host
  out.authorization = info.authorization
  out['x-forwarded-proto'] = 'http'
  out['x-request-id'] = info.requestId
  if (info.clientIp !== undefined) {
    const before = headers['x-forwarded-for']
    out['x-forwarded-for'] = before === undefined ? info.clientIp : `${String(before)}, ${info.clientIp}`
  }
  if (clientHost !== undefined) out['x-forwarded-host'] = clientHost
  return out
}

/**
 * The upstream's response headers as relayed to the client: without
 * hop-by-hop headers or those its `Connection` names, with the request id.
 */
export function relayedResponseHeaders (headers: HeaderValues, requestId: string): HeaderValues {
  const connection = headers.connection
  const named = connection === undefined ? undefined : namedIn(String(connection), undefined)
  const out: HeaderValues = {}
  for (const name in headers) {
    if (DROP_RESPONSE.has(name) || name === 'x-request-id' || named?.has(name) === true) continue
    out[name] = headers[name]
  }
  out['x-request-id'] = requestId
  return out
}

/** What one pass over the client's headers found. */
export interface ClientHeaders {
  /** flat [name, value, ...] list for undici */
  forward: string[]
  requestId: string | undefined
  host: string | undefined
  forwardedFor: string | undefined
  hasBody: boolean
  /** the declared Content-Length, 0 when there is none (no body, or chunked) */
  contentLength: number
}

/** Request ids from the client are kept when they look like ids. */
export const REQUEST_ID = /^[\w\-.:@/+=]{1,128}$/

/**
 * Splits the client's headers into those forwarded and those the sidecar
 * replaces. Headers the client's `Connection` names are dropped too, so that
 * `Connection: authorization` cannot remove anything the sidecar sets.
 */
export function readClientHeaders (raw: string[]): ClientHeaders {
  let connectionNamed: Set<string> | undefined
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]!.length === 10 && raw[i]!.toLowerCase() === 'connection') connectionNamed = namedIn(raw[i + 1]!, connectionNamed)
  }
  const forward: string[] = []
  let requestId: string | undefined
  let host: string | undefined
  let forwardedFor: string | undefined
  let hasBody = false
  let contentLength = 0
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase()
    const value = raw[i + 1]!
    if (DROP_REQUEST.has(name)) {
      switch (name) {
        case 'x-request-id': if (REQUEST_ID.test(value)) requestId = value; break
        case 'host': host = value; break
        case 'x-forwarded-for': forwardedFor = forwardedFor === undefined ? value : `${forwardedFor}, ${value}`; break
        case 'transfer-encoding': hasBody = true; break
      }
      continue
    }
    if (connectionNamed?.has(name) === true) continue
    if (name === 'content-length' && value !== '0') {
      hasBody = true
      contentLength = Number(value)
    }
    forward.push(name, value)
  }
  return { forward, requestId, host, forwardedFor, hasBody, contentLength }
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

/** Appends the sidecar's own headers to a flat header list (in place). */
function pushForwardingHeaders (headers: string[], client: ClientHeaders, info: ForwardingInfo): string[] {
  headers.push('host', info.host, 'authorization', info.authorization, 'x-forwarded-proto', 'http', 'x-request-id', info.requestId)
  if (info.dpop !== undefined) headers.push('dpop', info.dpop)
  if (info.clientIp !== undefined) {
    headers.push('x-forwarded-for', client.forwardedFor === undefined ? info.clientIp : `${client.forwardedFor}, ${info.clientIp}`)
  }
  if (client.host !== undefined) headers.push('x-forwarded-host', client.host)
  return headers
}

/** The handshake's own headers, which the WebSocket client to the upstream writes itself. */
const WEBSOCKET_HANDSHAKE = new Set(['sec-websocket-key', 'sec-websocket-version', 'sec-websocket-protocol', 'sec-websocket-extensions', 'content-length'])

/** Headers for the upstream WebSocket handshake, as an object for `ws`. */
export function websocketHeaders (client: ClientHeaders, info: ForwardingInfo): Record<string, string> {
  const headers: Record<string, string> = {}
  const list = pushForwardingHeaders(client.forward.slice(), client, info)
  for (let i = 0; i < list.length; i += 2) {
    const name = list[i]!
    if (WEBSOCKET_HANDSHAKE.has(name) || name === 'host') continue
    headers[name] = headers[name] === undefined ? list[i + 1]! : `${headers[name]}, ${list[i + 1]!}`
  }
  return headers
}
