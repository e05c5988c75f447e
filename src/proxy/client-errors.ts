import { randomUUID } from 'node:crypto'
import { STATUS_CODES, type IncomingMessage } from 'node:http'
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import { errorBody, ERRORS, type ErrorCode } from '../errors.js'
import { pathOf, type AccessLine } from './access-log.js'

/**
 * What Node answers on its own, before a request reaches Fastify, answered
 * instead in the sidecar's JSON shape and logged like any request: the
 * parser's refusals (a malformed request, headers too large or too slow)
 * and CONNECT, which Node would close without a word.
 */
export function clientErrors (route: string, onResponse: (line: AccessLine) => void): {
  onClientError: (err: Error & { code?: string, rawPacket?: unknown }, socket: Socket) => void
  onConnect: (req: IncomingMessage, socket: Duplex) => void
} {
  const answer = (socket: Duplex, code: ErrorCode, status: number, method: string, target: string): void => {
    const requestId = randomUUID()
    answerOnSocket(socket, code, status, requestId)
    onResponse({ requestId, route, method, path: pathOf(target), status, durationMs: 0 })
  }
  return {
    onClientError (err, socket) {
      // The client closed the connection, mid-request or not: nobody to
      // answer, and a request it had begun has its own line (499).
      if (err.code === 'ECONNRESET' || err.code === 'HPE_INVALID_EOF_STATE' || socket.destroyed || !socket.writable) return void socket.destroy()
      const code: ErrorCode = err.code === 'HPE_HEADER_OVERFLOW' ? 'headers_too_large' : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 'request_timeout' : 'malformed_request'
      // what the request line said, when it can be read: for the access line
      const raw = Buffer.isBuffer(err.rawPacket) ? err.rawPacket.toString('latin1') : ''
      const line = /^([A-Z]{1,20}) (\/[\x21-\x7e]{0,2000}) HTTP\/1\.[01]\r?\n/.exec(raw)
      answer(socket, code, ERRORS[code].status, line?.[1] ?? '', line?.[2] ?? '')
    },
    onConnect (req, socket) {
      answer(socket, 'method_not_allowed', 405, 'CONNECT', req.url ?? '')
    }
  }
}

/**
 * The sidecar's JSON answer written straight to a connection Fastify does
 * not hold (a parser's refusal, a CONNECT), with `Connection: close`: as
 * Node does after a parse error, nothing more is read from it.
 */
export function answerOnSocket (socket: Duplex, code: ErrorCode, status: number, requestId: string, retryAfter?: number): void {
  if (!socket.writable) return void socket.destroy()
  const body = errorBody(code)
  socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\ncontent-type: application/json; charset=utf-8\r\n` +
    `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\nx-request-id: ${requestId}\r\n` +
    `${retryAfter === undefined ? '' : `retry-after: ${retryAfter}\r\n`}\r\n${body}`,
  () => socket.destroy())
}
