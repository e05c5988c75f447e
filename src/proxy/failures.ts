import type { ServerResponse } from 'node:http'
import type { FastifyReply } from 'fastify'
import { CertificateUnusableError } from '../errors.js'
import { refusesCertificate } from '../tls/certificate.js'
import type { ProxyContext } from './context.js'
import { sendError } from './replies.js'

/**
 * What can end an exchange with the upstream before its answer, and how
 * each failure is counted and answered: the sidecar's 502 or 504, never
 * internal detail.
 */

/** Interim (1xx) answers taken before the final one; an upstream that sends more is failing. */
export const MAX_INTERIM_ANSWERS = 8

/** Why the sidecar answered 502 or 504 itself. */
export type UpstreamErrorReason = 'unreachable' | 'timeout' | 'reset'

/** Errors that mean the upstream took the connection but closed it under the request. */
const RESET_ERRORS = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE', 'UND_ERR_CLOSED', 'AUTH_SIDECAR_INTERIM_FLOOD'])
const TIMEOUT_ERRORS = new Set(['UND_ERR_HEADERS_TIMEOUT'])

/** How a failed exchange is counted and answered: a timeout (504), or the upstream unreachable or reset (502). */
export function upstreamFailure (err: unknown): { reason: UpstreamErrorReason, code: string } {
  const e = err as { code?: string, name?: string, cause?: { code?: string } }
  const code = e.code ?? e.cause?.code ?? e.name ?? 'error'
  return { reason: TIMEOUT_ERRORS.has(code) ? 'timeout' : RESET_ERRORS.has(code) ? 'reset' : 'unreachable', code }
}

/**
 * A failure before the upstream's answer, of a request or a WebSocket
 * handshake: logged (a client certificate that cannot be presented, or that
 * the upstream refused, named as such, else as `failed`), counted, and
 * answered 502 or 504.
 */
export function answerUpstreamFailure (o: ProxyContext, reply: FastifyReply, requestId: string, err: unknown, failed: string): void {
  const failure = upstreamFailure(err)
  const fields = { requestId, route: o.route.name, upstreamError: failure.code }
  if (err instanceof CertificateUnusableError) {
    o.log.warn({ ...fields, reason: err.message }, 'upstream request not sent: the client certificate cannot be presented')
  } else if (refusesCertificate(failure.code) || o.upstream.refusal() !== undefined) {
    o.log.warn({ ...fields, tlsAlert: o.upstream.refusal() ?? failure.code, certificate: o.upstream.subject ?? null }, o.upstream.subject === undefined
      ? 'the upstream requires a client certificate: set UPSTREAM_TLS_CERT_FILE and UPSTREAM_TLS_KEY_FILE'
      : 'the upstream refused the client certificate')
  } else {
    o.log.warn(fields, failed)
  }
  o.events.emit('upstream_error', { route: o.route.name, ...failure })
  sendError(reply, failure.reason === 'timeout' ? 'upstream_timeout' : 'upstream_unreachable')
}

/** Whether the client's connection is gone, its answer unfinished. */
export function isClientGone (res: ServerResponse): boolean {
  return res.destroyed && !res.writableFinished
}
