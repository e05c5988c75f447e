import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { Authorization, RequestCredential } from '../token/credential.js'
import { sendTokenUnavailable } from './replies.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** what goes upstream with the request: the credential's authorization */
    sidecarAuthorization: Authorization | undefined
  }
}

/**
 * Takes the route's authorization for the request before it is forwarded.
 * While a token is being obtained the request waits (TOKEN_WAIT_MS at most),
 * then gets 503 token_unavailable, unforwarded.
 */
export const authorize = fp<{ credential: RequestCredential }>(async function authorize (app: FastifyInstance, { credential }) {
  app.decorateRequest('sidecarAuthorization', undefined)
  app.addHook('onRequest', (request, reply, done) => {
    const held = credential.current()
    if (held !== undefined) {
      request.sidecarAuthorization = held
      return done()
    }
    credential.authorize().then((authorization) => {
      request.sidecarAuthorization = authorization
      done()
    }, (err: unknown) => sendTokenUnavailable(reply, err))
  })
})
