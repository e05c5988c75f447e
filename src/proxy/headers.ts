/**
 * Header rules of the proxy (SPEC §3.2, §3.6), on Node's flat `rawHeaders`
 * arrays: one pass per message, no intermediate objects.
 */

/**
 * Request headers never forwarded as the client sent them: hop-by-hop
 * headers (RFC 9110 §7.6.1), the client's own credentials, and those the
 * sidecar sets itself.
 */
const DROP_REQUEST = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect',
  'host', 'authorization', 'proxy-authorization',
  'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host', 'x-request-id'
])

/** Hop-by-hop headers of the upstream's answer, which concern only that connection. */
const DROP_RESPONSE = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'trailer', 'te'])

/** What the sidecar adds to every forwarded request. */
export interface ForwardingInfo {
  authorization: string
  /** the upstream's `host[:port]` */
  host: string
  requestId: string
  clientIp: string | undefined
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
const REQUEST_ID = /^[\w\-.:@/+=]{1,128}$/

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

/** Appends the sidecar's own headers to `headers` (in place). */
export function pushForwardingHeaders (headers: string[], client: ClientHeaders, info: ForwardingInfo): string[] {
  headers.push('host', info.host, 'authorization', info.authorization, 'x-forwarded-proto', 'http', 'x-request-id', info.requestId)
  if (info.clientIp !== undefined) {
    headers.push('x-forwarded-for', client.forwardedFor === undefined ? info.clientIp : `${client.forwardedFor}, ${info.clientIp}`)
  }
  if (client.host !== undefined) headers.push('x-forwarded-host', client.host)
  return headers
}

/**
 * The upstream's response headers (undici's Buffer pairs) as a flat string
 * list for `writeHead`, without hop-by-hop headers or those its `Connection`
 * names.
 */
export function responseHeaders (raw: Buffer[], requestId: string): string[] {
  const out: string[] = []
  let connectionNamed: Set<string> | undefined
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toString('latin1').toLowerCase()
    if (DROP_RESPONSE.has(name)) {
      if (name === 'connection') connectionNamed = namedIn(raw[i + 1]!.toString('latin1'), connectionNamed)
      continue
    }
    if (name === 'x-request-id') continue
    out.push(name, raw[i + 1]!.toString('latin1'))
  }
  if (connectionNamed !== undefined) {
    for (let i = out.length - 2; i >= 0; i -= 2) {
      if (connectionNamed.has(out[i]!)) out.splice(i, 2)
    }
  }
  out.push('x-request-id', requestId)
  return out
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
