import type { ClientAuth } from '../config/types.js'
import { GrantError, keycloakHint, TOKEN_EXCHANGE } from './grant.js'

/** What a refusal's advice is made from: the grant refused, and the settings it was sent with. */
export interface RefusalContext {
  grant: string
  clientAuth: ClientAuth
  scope: string | undefined
}

/** Where each way of authenticating the client takes its credential from. */
const CLIENT_CREDENTIAL: Record<ClientAuth, string> = {
  client_secret_post: 'AUTH_CLIENT_SECRET',
  client_secret_basic: 'AUTH_CLIENT_SECRET',
  client_secret_jwt: 'AUTH_CLIENT_SECRET',
  private_key_jwt: 'AUTH_CLIENT_KEY_FILE (the server must hold its public key, under the kid the assertions carry)',
  federated_jwt: 'AUTH_CLIENT_ASSERTION_FILE (the server must trust its issuer)',
  tls_client_auth: 'AUTH_TLS_CERT_FILE (the server must know the certificate\'s subject)',
  self_signed_tls_client_auth: 'AUTH_TLS_CERT_FILE (the server must hold the certificate in the client\'s registration)'
}

/**
 * A refusal of the token endpoint, its message naming what to change: the
 * client's authentication settings, AUTH_GRANT_TYPE or AUTH_SCOPE, as its
 * OAuth error says (RFC 6749 §5.2). The log and `check` say the message as
 * it is. A refusal Keycloak's own description already explains keeps its
 * hint alone; a refresh token refused is not advice-worthy (the grant
 * falls back).
 */
export function advised (err: GrantError, context: RefusalContext): GrantError {
  if (err.kind !== 'rejected' || err.oauthError === undefined || keycloakHint(err.description ?? '') !== undefined) return err
  const advice = adviceFor(err.oauthError, err.description ?? '', context)
  if (advice === undefined) return err
  return new GrantError(err.message + advice, err.kind, {
    oauthError: err.oauthError,
    ...(err.description !== undefined && { description: err.description }),
    ...(err.status !== undefined && { status: err.status }),
    ...(err.retryAfterMs !== undefined && { retryAfterMs: err.retryAfterMs }),
    ...(err.step !== undefined && { step: err.step })
  })
}

function adviceFor (error: string, description: string, { grant, clientAuth, scope }: RefusalContext): string | undefined {
  const own = grant === 'password' || grant === 'client_credentials'
  switch (error) {
    case 'invalid_client':
    case 'unauthorized_client': {
      const credential = CLIENT_CREDENTIAL[clientAuth]
      const method = clientAuth === 'client_secret_basic'
        ? ', and whether the server takes client_secret_basic (AUTH_CLIENT_AUTH)'
        : `, and AUTH_CLIENT_AUTH (${clientAuth}: one of the methods the client is registered with)`
      // unauthorized_client is RFC 6749's for a grant the client may not use (Keycloak's for bad credentials too)
      const allowed = error === 'unauthorized_client' && own ? `; or the client may not use the ${grant} grant (AUTH_GRANT_TYPE)` : ''
      return `. Check AUTH_CLIENT_ID and ${credential}${method}${allowed}`
    }
    case 'unsupported_grant_type':
      if (grant === TOKEN_EXCHANGE) return ': the server does not offer token exchange (RFC 8693) to this client'
      return own ? `: the server does not offer the ${grant} grant; set AUTH_GRANT_TYPE to one it does (client_credentials is the one most servers offer a service)` : undefined
    case 'invalid_scope':
      if (!own && grant !== 'refresh_token') return undefined
      return scope === undefined
        ? '. Check AUTH_SCOPE: it is unset, and the server may require one'
        : `. Check AUTH_SCOPE (${JSON.stringify(scope)}): the server refuses it, or a part of it, for this client`
    case 'invalid_grant':
      return grant === 'password' && /credentials/i.test(description) ? '. Check AUTH_USERNAME and AUTH_PASSWORD (or their files)' : undefined
    default:
      return undefined
  }
}
