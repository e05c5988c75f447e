import { METHODS, type IncomingHttpHeaders } from 'node:http'
import type { Readable } from 'node:stream'
import httpProxy, { type FastifyHttpProxyOptions } from '@fastify/http-proxy'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { Dispatcher } from 'undici'
import { errorBody, TokenUnavailableError, type ErrorCode, ERRORS } from '../errors.js'
import type { AuthorizationSource } from '../token/manager.js'
import { isConfined } from './confine.js'
import { forwardHeaders, hasNoBody, responseHeaders, websocketHeaders } from './headers.js'

export interface ProxyOptions {
  /** `scheme://host[:port]` of BASE_URL */
  origin: string
  /** BASE_URL's path without the trailing slash, '' for none */
  basePath: string
  dispatcher: Dispatcher
  tokens: AuthorizationSource
  onResponse?: (status: number, seconds: number) => void
}

const kAuth = Symbol('authorization')
const kReplayed = Symbol('replayed')
const kDest = Symbol('destination')
const kOptions = Symbol('reply-from options')

interface ProxiedRequest extends FastifyRequest {
  [kAuth]?: string
  [kReplayed]?: boolean
  [kDest]?: string
  [kOptions]?: object
}

/** TRACE would echo the injected Authorization header back to the client. */
const REFUSED_METHODS = new Set(['TRACE', 'CONNECT'])

/**
 * The authenticated proxy (SPEC §3): every method and path under BASE_URL,
 * bodies streamed, the sidecar's Authorization on every request, upstream
 * failures as JSON 502/504, and one renewal and replay on an upstream 401.
 */
export async function proxyPlugin (app: FastifyInstance, opts: ProxyOptions): Promise<void> {
  const { tokens } = opts
  const methods = METHODS.filter((m) => !REFUSED_METHODS.has(m))
  for (const m of methods) {
    if (!app.supportedMethods.includes(m)) app.addHttpMethod(m, { hasBody: true })
  }

  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id)
    if (!isConfined(request.raw.url ?? '')) return sendError(reply, 'bad_request')
    if (REFUSED_METHODS.has(request.method)) return sendError(reply, 'bad_request', 405)
    done()
  })

  app.addHook('onResponse', (request, reply, done) => {
    const status = reply.statusCode
    const seconds = reply.elapsedTime / 1000
    request.log.info({
      method: request.method,
      path: pathOf(request.raw.url ?? ''),
      status,
      durationMs: Math.round(reply.elapsedTime * 10) / 10
    }, 'request')
    opts.onResponse?.(status, seconds)
    done()
  })

  app.setNotFoundHandler((_request, reply) => sendError(reply, 'bad_request'))

  const proxyOptions = {
    upstream: opts.origin,
    prefix: '/',
    rewritePrefix: `${opts.basePath}/`,
    httpMethods: methods,
    undici: opts.dispatcher as never,
    disableRequestLogging: true,
    websocket: true,
    wsClientOptions: {
      // The upgrade passed the same preHandler, so the token is at hand.
      rewriteRequestHeaders: (_headers: IncomingHttpHeaders, request: ProxiedRequest) => websocketHeaders(request.headers, {
        authorization: request[kAuth] ?? '',
        requestId: request.id,
        clientIp: request.raw.socket.remoteAddress,
        host: request.headers.host
      })
    },
    preHandler (request: ProxiedRequest, reply: FastifyReply, done: (err?: Error) => void) {
      const header = tokens.current()
      if (header !== undefined) {
        request[kAuth] = header
        done()
        return
      }
      tokens.authorization().then((h) => {
        request[kAuth] = h
        done()
      }, (err: unknown) => sendTokenUnavailable(reply, err))
    },
    handler (request: ProxiedRequest, reply: FastifyReply, dest: string, options: object) {
      request[kDest] = dest
      request[kOptions] = options
      return reply.from(dest, options)
    },
    replyOptions: {
      rewriteHeaders: responseHeaders,
      retryDelay: staleSocketRetry,
      rewriteRequestHeaders (request: ProxiedRequest, headers: IncomingHttpHeaders) {
        return forwardHeaders(headers, {
          authorization: request[kAuth] ?? '',
          requestId: request.id,
          clientIp: request.raw.socket.remoteAddress,
          host: request.headers.host
        })
      },
      onResponse (request: ProxiedRequest, reply: FastifyReply, res: { statusCode: number, stream: Readable }) {
        const { stream } = res
        if (res.statusCode === 401) {
          const used = request[kAuth]
          if (used !== undefined) tokens.rejected(used)
          if (request[kReplayed] !== true && hasNoBody(request.headers)) {
            request[kReplayed] = true
            stream.resume() // the 401's body is not relayed; free the connection
            replay(request, reply)
            return
          }
        }
        reply.send(stream)
      },
      onError (reply: FastifyReply, { error }: { error: Error & { statusCode?: number, cause?: { code?: string } } }) {
        const code = upstreamErrorCode(error)
        reply.log.warn({ upstreamError: error.cause?.code ?? error.name }, code === 'bad_request' ? 'request target refused' : 'upstream request failed')
        sendError(reply, code)
      }
    }
  }
  // The plugin's types do not know our request decorations; the shapes match at run time.
  await app.register(httpProxy, proxyOptions as unknown as FastifyHttpProxyOptions)

  function replay (request: ProxiedRequest, reply: FastifyReply): void {
    // Headers of the rejected answer were already copied onto the reply.
    for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name)
    reply.header('x-request-id', request.id)
    tokens.authorization().then((header) => {
      request[kAuth] = header
      reply.from(request[kDest], request[kOptions])
    }, (err: unknown) => sendTokenUnavailable(reply, err))
  }
}

/** Idempotent methods without a body may be sent again when a pooled socket turned out dead. */
const RETRYABLE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS'])

/**
 * reply-from's own policy retries a GET answered 503 up to ten times; ours
 * retries once, only when a kept-alive socket was closed under the request
 * ("other side closed"), and never a request with a body.
 */
function staleSocketRetry ({ err, req, attempt }: { err?: { code?: string } | null, req: { method: string, headers: IncomingHttpHeaders }, attempt: number }): number | null {
  if (attempt > 0 || err?.code !== 'UND_ERR_SOCKET') return null
  return RETRYABLE_METHODS.has(req.method) && hasNoBody(req.headers) ? 1 : null
}

function sendTokenUnavailable (reply: FastifyReply, err: unknown): void {
  const seconds = err instanceof TokenUnavailableError ? err.retryAfterSeconds : 1
  reply.header('retry-after', String(seconds))
  sendError(reply, 'token_unavailable')
}

function sendError (reply: FastifyReply, code: ErrorCode, status: number = ERRORS[code].status): void {
  reply.code(status).header('content-type', 'application/json; charset=utf-8').send(errorBody(code))
}

function upstreamErrorCode (error: { statusCode?: number, cause?: { code?: string } }): ErrorCode {
  if (error.statusCode === 400) return 'bad_request'
  if (error.statusCode === 504 || error.cause?.code === 'UND_ERR_HEADERS_TIMEOUT') return 'upstream_timeout'
  return 'upstream_unreachable'
}

function pathOf (url: string): string {
  const q = url.indexOf('?')
  return q === -1 ? url : url.slice(0, q)
}
