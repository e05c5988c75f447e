import type { IncomingHttpHeaders } from 'node:http'

/**
 * Hop-by-hop headers (RFC 9110 §7.6.1) and the client's own credentials.
 * reply-from already drops `Connection` and every header it names before we
 * run, so a `Connection: authorization` cannot remove the header set here.
 */
const DROPPED = ['authorization', 'proxy-authorization', 'proxy-connection', 'keep-alive', 'te', 'trailer', 'upgrade', 'transfer-encoding']

export interface ForwardingInfo {
  authorization: string
  requestId: string
  clientIp: string | undefined
  host: string | undefined
}

/** Turns the client's headers (a copy, already without `Connection`) into the upstream's. */
export function forwardHeaders (headers: IncomingHttpHeaders, info: ForwardingInfo): IncomingHttpHeaders {
  for (const name of DROPPED) {
    if (headers[name] !== undefined) delete headers[name]
  }
  headers.authorization = info.authorization
  const xff = headers['x-forwarded-for']
  if (info.clientIp !== undefined) {
    headers['x-forwarded-for'] = xff === undefined ? info.clientIp : `${String(xff)}, ${info.clientIp}`
  }
  headers['x-forwarded-proto'] = 'http'
  if (info.host !== undefined) headers['x-forwarded-host'] = info.host
  else delete headers['x-forwarded-host']
  headers['x-request-id'] = info.requestId
  return headers
}

/** Whether a request has no body, so that it can be sent again after a 401. */
export function hasNoBody (headers: IncomingHttpHeaders): boolean {
  const length = headers['content-length']
  return headers['transfer-encoding'] === undefined && (length === undefined || length === '0')
}

/** Hop-by-hop headers of the upstream's answer, which concern only that connection. */
const RESPONSE_HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'trailer']

/** Removes the upstream response's hop-by-hop headers, and those its `Connection` names. */
export function responseHeaders (headers: IncomingHttpHeaders): IncomingHttpHeaders {
  const connection = headers.connection
  if (connection !== undefined) {
    for (const name of String(connection).split(',')) delete headers[name.trim().toLowerCase()]
  }
  for (const name of RESPONSE_HOP_BY_HOP) {
    if (headers[name] !== undefined) delete headers[name]
  }
  return headers
}

/** The handshake's own headers, which the WebSocket client to the upstream writes itself. */
const WEBSOCKET_HANDSHAKE = ['host', 'connection', 'upgrade', 'sec-websocket-key', 'sec-websocket-version', 'sec-websocket-protocol', 'sec-websocket-extensions', 'content-length']

/** Headers for the upstream WebSocket handshake: the client's, less the handshake's, plus ours. */
export function websocketHeaders (clientHeaders: IncomingHttpHeaders, info: ForwardingInfo): IncomingHttpHeaders {
  const headers: IncomingHttpHeaders = { ...clientHeaders }
  const connection = headers.connection
  if (connection !== undefined) {
    for (const name of String(connection).split(',')) delete headers[name.trim().toLowerCase()]
  }
  for (const name of WEBSOCKET_HANDSHAKE) delete headers[name]
  return forwardHeaders(headers, info)
}
