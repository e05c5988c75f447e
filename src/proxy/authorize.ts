import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { AuthorizationSource } from '../token/source.js'
import { sendTokenUnavailable } from './replies.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** the Authorization header value sent upstream */
    sidecarAuthorization: string
  }
}

/**
 * Takes the token for the request before it is forwarded: the plugin's
 * header rewriting is synchronous, so the header must be at hand by then.
 * While a token is being obtained the request waits (TOKEN_WAIT_MS at most),
 * then gets 503 token_unavailable, unforwarded.
 */
export const authorize = fp<{ tokens: AuthorizationSource }>(async function authorize (app: FastifyInstance, { tokens }) {
  app.decorateRequest('sidecarAuthorization', '')
  app.addHook('onRequest', (request, reply, done) => {
    const header = tokens.current()
    if (header !== undefined) {
      request.sidecarAuthorization = header
      return done()
    }
    tokens.authorization().then((h) => {
      request.sidecarAuthorization = h
      done()
    }, (err: unknown) => sendTokenUnavailable(reply, err))
  })
}, { name: 'auth-sidecar-authorize', dependencies: ['auth-sidecar-guard'] })
