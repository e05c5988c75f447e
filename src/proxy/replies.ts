import type { FastifyReply } from 'fastify'
import { errorBody, ERRORS, TokenUnavailableError, type ErrorCode } from '../errors.js'

/** The sidecar's own answers: JSON, no internal detail. */
export function sendError (reply: FastifyReply, code: ErrorCode, options: { status?: number, retryAfter?: number, close?: boolean } = {}): void {
  if (reply.sent || reply.raw.headersSent) return
  reply.request.sidecarTrace?.failed(code)
  // an answer of the upstream's may have begun (its headers set, none sent): none of them goes with the sidecar's
  for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name)
  reply.code(options.status ?? ERRORS[code].status)
  reply.header('content-type', 'application/json; charset=utf-8')
  reply.header('x-request-id', reply.request.id)
  if (options.retryAfter !== undefined) reply.header('retry-after', String(options.retryAfter))
  if (options.close === true) reply.header('connection', 'close')
  reply.send(errorBody(code))
}

/** 503 token_unavailable, with the Retry-After the token layer gave. */
export function sendTokenUnavailable (reply: FastifyReply, err: unknown): void {
  const seconds = err instanceof TokenUnavailableError ? err.retryAfterSeconds : 1
  sendError(reply, 'token_unavailable', { retryAfter: seconds })
}
