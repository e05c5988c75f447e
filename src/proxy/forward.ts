import type { ServerResponse } from 'node:http'
import httpProxy from '@fastify/http-proxy'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { Dispatcher } from 'undici'
import type { Logger } from '../logger.js'
import type { AuthorizationSource } from '../token/source.js'
import { upstream401, type DpopRefusal } from './dpop-challenge.js'
import { relayedResponseHeaders, upstreamRequestHeaders, type HeaderValues } from './headers.js'
import { sendError, sendTokenUnavailable } from './replies.js'
import { kClientResponse } from './upstream.js'

/** Why the sidecar answered 502 or 504 itself. */
export type UpstreamErrorReason = 'unreachable' | 'timeout' | 'reset'

export interface ForwardOptions {
  /** `scheme://host[:port]` of BASE_URL */
  origin: string
  /** BASE_URL's path without the trailing slash, '' for none */
  basePath: string
  /** every method forwarded */
  methods: string[]
  /** verifies TLS; closed by whoever created it */
  dispatcher: Dispatcher
  tokens: AuthorizationSource
  log: Logger
  /** the sidecar answered 502 or 504 itself, for this reason */
  onUpstreamError: (reason: UpstreamErrorReason) => void
  /** the upstream refused a DPoP proof (a 401 with a DPoP error), for this reason */
  onDpopRefused: (reason: DpopRefusal) => void
}

/** Idempotent methods without a body may be sent again when a pooled socket turned out dead. */
const RETRYABLE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS'])
/** The errors of a kept-alive socket that the upstream closed under the request. */
const STALE_SOCKET_ERRORS = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE'])
/** Errors that mean the upstream took the connection but closed it under the request. */
const RESET_ERRORS = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE', 'UND_ERR_CLOSED'])

declare module 'fastify' {
  interface FastifyRequest {
    /** the upstream path http-proxy computed, for a replay */
    sidecarDestination: string
    sidecarReplayed: boolean
    /** the client's response, so that the upstream dispatcher can tell whether the client is still there */
    sidecarResponse: ServerResponse | undefined
  }
}

/**
 * Every route: @fastify/http-proxy over the sidecar's own undici dispatcher,
 * with what the plugin's defaults get wrong for a credential-injecting proxy
 * set here: the dispatcher verifies TLS and keeps UPSTREAM_TIMEOUT_MS for the
 * response headers apart from UPSTREAM_IDLE_TIMEOUT_MS for a silent body;
 * errors are the sidecar's JSON, never internal detail; only a stale pooled
 * socket is retried; an upstream 401 renews the token and replays a request
 * without a body. In DPoP mode the upstream's nonces are kept for the next
 * proofs, and a 401 that asks for one replays such a request with it.
 */
export const forward = fp<ForwardOptions>(async function forward (app: FastifyInstance, o: ForwardOptions) {
  const upstreamHost = new URL(o.origin).host
  app.decorateRequest('sidecarDestination', '')
  app.decorateRequest('sidecarReplayed', false)
  app.decorateRequest('sidecarResponse', undefined)

  /** http-proxy's reply options (ours, with its header rewriting), for a replay */
  let routeOptions: object | undefined
  await app.register(httpProxy, {
    upstream: o.origin + o.basePath,
    httpMethods: o.methods,
    undici: o.dispatcher as never,
    disableRequestLogging: true,
    // Location is relayed as the upstream wrote it: redirects are the client's to follow.
    internalRewriteLocationHeader: false,
    // WebSockets have the sidecar's own upgrade handler (src/proxy/websocket.ts).
    websocket: false,
    handler (request, reply, dest, options) {
      request.sidecarDestination = dest
      request.sidecarResponse = reply.raw
      routeOptions = options
      return reply.from(dest, options)
    },
    replyOptions: {
      rewriteRequestHeaders (request, headers) {
        const h = headers as HeaderValues
        // Fastify does not read a GET or HEAD body, so none is sent: the
        // upstream must not wait for one.
        if (request.method === 'GET' || request.method === 'HEAD') h['content-length'] = undefined
        const out = upstreamRequestHeaders(h, request.raw.headers.host, {
          authorization: request.sidecarAuthorization,
          host: upstreamHost,
          requestId: request.id,
          clientIp: request.raw.socket.remoteAddress
        })
        return Object.assign(out, { [kClientResponse]: request.sidecarResponse }) as Record<string, string>
      },
      rewriteHeaders (headers, request) {
        return relayedResponseHeaders(headers as HeaderValues, (request as FastifyRequest).id) as Record<string, string>
      },
      // Only a stale pooled socket, once, for a bodiless idempotent request;
      // reply-from's default retries a GET answered 503 ten times.
      retryDelay ({ err, req, attempt }) {
        if (attempt > 0 || err == null) return null
        const code = (err as { code?: string }).code ?? ''
        const body = (req as { body?: unknown } | undefined)?.body
        if (!STALE_SOCKET_ERRORS.has(code) || !RETRYABLE_METHODS.has(req?.method ?? '') || (body != null && body !== '')) return null
        return 1 // ms; reply-from takes 0 for "no retry"
      },
      onResponse (request, reply, res) {
        const stream = res.stream as NodeJS.ReadableStream & { destroy(): void }
        if (reply.sent) return stream.destroy() // an invalid status code was already answered 502
        const headers = (res as { headers?: HeaderValues }).headers ?? {}
        o.tokens.upstreamNonce(headers['dpop-nonce'])
        if (res.statusCode === 401) return upstreamRejected(request as FastifyRequest, reply as FastifyReply, res.stream, headers)
        o.tokens.accepted()
        stream.once('error', (err: Error & { code?: string }) => {
          // the client may have left first, which destroys this stream too
          if (isClientGone(request as FastifyRequest)) return
          // once the client has the upstream's status, the failure can only cut the body
          ;(request as FastifyRequest).sidecarUpstreamFailed = reply.raw.headersSent
          o.log.warn({ requestId: request.id, upstreamError: err.code ?? err.name }, 'upstream closed the connection in the middle of its answer')
          // UPSTREAM_IDLE_TIMEOUT_MS: the upstream fell silent
          o.onUpstreamError(err.code === 'UND_ERR_BODY_TIMEOUT' ? 'timeout' : 'reset')
        })
        reply.send(res.stream)
        // Fastify writes the headers with the first chunk of the body: an
        // event stream's client would wait for its first event to see them.
        if (String(headers['content-type']).startsWith('text/event-stream')) (reply.raw as ServerResponse).flushHeaders()
      },
      onError (reply, { error }) {
        const cause = (error as { cause?: { code?: string } }).cause
        const code = cause?.code ?? (error as { code?: string }).code
        // the client left (mid-upload, say): nothing to answer, and nothing the upstream did
        if (code === 'AUTH_SIDECAR_CLIENT_GONE' || isClientGone(reply.request as FastifyRequest)) return
        const timedOut = code === 'UND_ERR_HEADERS_TIMEOUT' || (error as { statusCode?: number }).statusCode === 504
        o.log.warn({ requestId: reply.request.id, upstreamError: code ?? error.name }, 'upstream request failed')
        o.onUpstreamError(timedOut ? 'timeout' : RESET_ERRORS.has(code ?? '') ? 'reset' : 'unreachable')
        sendError(reply as FastifyReply, timedOut ? 'upstream_timeout' : 'upstream_unreachable')
      }
    }
  })

  /**
   * Upstream 401: the token is dropped and renewed (once per rejected token,
   * in the token manager); a request without a body is sent once more with
   * the new token, one with a body gets the 401. A 401 that refuses the DPoP
   * proof, not the token, leaves the token alone: asked for a nonce, such a
   * request is sent once more with it.
   */
  function upstreamRejected (request: FastifyRequest, reply: FastifyReply, body: unknown, headers: HeaderValues): void {
    const { refusal, renewing } = upstream401(headers['www-authenticate'], request.sidecarAuthorization, o.tokens, o.onDpopRefused)
    const again = renewing || refusal === 'use_dpop_nonce'
    if (!again || request.sidecarReplayed || hasBody(request.raw.headers as HeaderValues)) {
      reply.send(body)
      return
    }
    request.sidecarReplayed = true
    ;(body as NodeJS.ReadableStream).resume()
    // nothing of the 401 may leak into the replay's answer
    for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name)
    if (refusal !== undefined) return void reply.from(request.sidecarDestination, routeOptions)
    o.tokens.authorization().then((header) => {
      request.sidecarAuthorization = header
      reply.from(request.sidecarDestination, routeOptions)
    }, (err: unknown) => sendTokenUnavailable(reply, err))
  }
}, { name: 'auth-sidecar-forward', dependencies: ['auth-sidecar-authorize'] })

/** Whether the client's connection is gone, its answer unfinished. */
function isClientGone (request: FastifyRequest): boolean {
  const res = request.sidecarResponse
  return res !== undefined && res.destroyed && !res.writableFinished
}

function hasBody (headers: HeaderValues): boolean {
  const length = headers['content-length']
  return headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0')
}
