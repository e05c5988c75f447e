import type { FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type { Authorization, RequestCredential } from '../token/credential.js'
import type { UpstreamConnections } from './context.js'
import { sendTokenUnavailable } from './replies.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** what goes upstream with the request: the credential's authorization */
    sidecarAuthorization: Authorization | undefined
  }
}

/**
 * Takes the authorization of the request's route before it is forwarded.
 * While a token is being obtained the request waits (TOKEN_WAIT_MS at most),
 * then gets 503 token_unavailable, unforwarded.
 */
export const authorize = fp(async function authorize (app: FastifyInstance) {
  app.decorateRequest('sidecarAuthorization', undefined)
  app.addHook('onRequest', (request, reply, done) => {
    // what no route took goes nowhere with a credential
    const credential = request.sidecarRoute?.context.credential
    if (credential === undefined) return done()
    const held = credential.current()
    if (held !== undefined) {
      request.sidecarAuthorization = held
      return done()
    }
    credential.authorize().then((authorization) => {
      request.sidecarTrace?.waitedFor(credential)
      request.sidecarAuthorization = authorization
      done()
    }, (err: unknown) => {
      request.sidecarTrace?.waitedFor(credential)
      sendTokenUnavailable(reply, err)
    })
  })
})

/**
 * The authorization a request goes upstream with over `upstream`'s
 * connections: a certificate-bound token goes only where its certificate is
 * presented. When the upstream's files present another certificate than the
 * token's (its copy of a renewed certificate not renewed yet, say), the
 * credential's token bound to the one the upstream presents goes instead,
 * while it is valid; otherwise the authorization as it is.
 */
export function forConnection (authorization: Authorization, upstream: Pick<UpstreamConnections, 'presents' | 'certificate'>, credential: Pick<RequestCredential, 'boundTo'>): Authorization {
  const bound = authorization.certificate
  if (bound === undefined || upstream.presents(bound)) return authorization
  const presented = upstream.certificate
  return (presented === undefined ? undefined : credential.boundTo(presented)) ?? authorization
}
