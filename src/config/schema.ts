import { KEY_ALGORITHMS } from './client-key.js'

/**
 * The one list of configuration variables: name, type, default and the line
 * of documentation that README.md, .env.example and the Helm chart repeat.
 * Every default is also exported as a `DEFAULT_*` constant.
 */

export const DEFAULT_AUTH_MODE = 'oauth2'
export const DEFAULT_AUTH_REALM = 'service-realm'
export const DEFAULT_AUTH_GRANT_TYPE = 'password'
export const DEFAULT_AUTH_CLIENT_AUTH = 'client_secret_post'
export const DEFAULT_AUTH_LOGOUT_ON_SHUTDOWN = true
export const DEFAULT_AUTH_DPOP = false
export const DEFAULT_AUTH_DPOP_ALG = 'ES256'
export const DEFAULT_PROXY_HOST = '127.0.0.1'
export const DEFAULT_PROXY_PORT = 8080
export const DEFAULT_PROXY_MAX_REQUESTS = 1024
export const DEFAULT_PROXY_MAX_CONNECTIONS = 1024
export const DEFAULT_ADMIN_MAX_CONNECTIONS = 64
export const DEFAULT_ADMIN_HOST = '0.0.0.0'
export const DEFAULT_ADMIN_PORT = 9090
export const DEFAULT_LOG_LEVEL = 'info'
export const DEFAULT_ACCESS_LOG = true
export const DEFAULT_UPSTREAM_TIMEOUT_MS = 30_000
export const DEFAULT_UPSTREAM_IDLE_TIMEOUT_MS = 300_000
export const DEFAULT_UPSTREAM_CONNECTIONS = 128
export const DEFAULT_UPSTREAM_KEEPALIVE_MS = 4_000
export const DEFAULT_WEBSOCKET_MAX_MESSAGE_BYTES = 1_048_576
export const DEFAULT_TOKEN_TIMEOUT_MS = 10_000
export const DEFAULT_TOKEN_WAIT_MS = 5_000
export const DEFAULT_TOKEN_RETRY_MIN_MS = 1_000
export const DEFAULT_TOKEN_RETRY_MAX_MS = 30_000
export const DEFAULT_TOKEN_REJECTED_RETRY_MS = 60_000
export const DEFAULT_SHUTDOWN_GRACE_MS = 10_000

/** The DPoP key's algorithms (AUTH_DPOP_ALG). */
export const DPOP_ALGORITHMS = ['ES256', 'EdDSA', 'RS256', 'PS256'] as const

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const

interface Property {
  type: 'string' | 'integer' | 'boolean'
  description: string
  default?: string | number | boolean
  enum?: readonly string[]
  minimum?: number
  maximum?: number
  minLength?: number
  /** a secret: its value is never printed, whatever the error */
  secret?: boolean
  /** documentation only: the loader checks presence, with the rules between variables */
  required?: true
}

const port = (description: string, value: number): Property =>
  ({ type: 'integer', description, default: value, minimum: 0, maximum: 65535 })
const millis = (description: string, value: number, minimum = 1): Property =>
  ({ type: 'integer', description, default: value, minimum, maximum: 2_147_483_647 })
const text = (description: string, extra: Partial<Property> = {}): Property =>
  ({ type: 'string', description, minLength: 1, ...extra })

export const properties = {
  BASE_URL: text('upstream base URL (http or https); a path prefix is kept', { required: true }),
  AUTH_MODE: text('oauth2 (bearer token from the token endpoint) or basic (RFC 7617, no token endpoint)', { enum: ['oauth2', 'basic'], default: DEFAULT_AUTH_MODE }),
  AUTH_URL: text('base URL of the auth server, without /auth or /realms/...; required in oauth2 mode unless AUTH_TOKEN_URL or AUTH_ISSUER_URL is set'),
  AUTH_REALM: text('realm segment of the token path', { default: DEFAULT_AUTH_REALM }),
  AUTH_TOKEN_URL: text('full token endpoint URL; overrides {AUTH_URL}/auth/realms/{AUTH_REALM}/protocol/openid-connect/token and discovery'),
  AUTH_ISSUER_URL: text('the issuer, exactly as the server names it (Keycloak: https://host/realms/<realm>; a bare origin is fine): the token, end-session and revocation endpoints come from its /.well-known/openid-configuration, else (404) its RFC 8414 /.well-known/oauth-authorization-server metadata'),
  AUTH_DISCOVERY_URL: text('where the discovery document is fetched when the auth server is reached by another address than its issuer (a Kubernetes Service: http://keycloak.auth:8080/realms/<realm>, or either document\'s full URL, OpenID Connect\'s or RFC 8414\'s); AUTH_ISSUER_URL is then the issuer the document must name, and endpoints under it are reached at this address'),
  AUTH_GRANT_TYPE: text('client_credentials (the client\'s own service account: a client secret, key or assertion, no user) or password (an existing service user, AUTH_USERNAME and AUTH_PASSWORD)', { enum: ['password', 'client_credentials'], default: DEFAULT_AUTH_GRANT_TYPE }),
  AUTH_CLIENT_ID: text('OAuth client id; required in oauth2 mode'),
  AUTH_CLIENT_SECRET: text('client secret, for confidential clients; required by client_credentials unless the client signs its assertion or presents a certificate (AUTH_CLIENT_AUTH=private_key_jwt, federated_jwt, tls_client_auth or self_signed_tls_client_auth)', { secret: true }),
  AUTH_CLIENT_SECRET_FILE: text('file holding the client secret (re-read when it changes)'),
  AUTH_CLIENT_AUTH: text('how the client authenticates to the token endpoint: client_secret_post (form fields), client_secret_basic (an Authorization header, RFC 6749 2.3.1), private_key_jwt (an assertion signed with AUTH_CLIENT_KEY_FILE), client_secret_jwt (an assertion signed with AUTH_CLIENT_SECRET, HS256), federated_jwt (the JWT in AUTH_CLIENT_ASSERTION_FILE, as it is), tls_client_auth (the certificate in AUTH_TLS_CERT_FILE, RFC 8705) or self_signed_tls_client_auth (the same with a self-signed certificate the server holds)', { enum: ['client_secret_post', 'client_secret_basic', 'private_key_jwt', 'client_secret_jwt', 'federated_jwt', 'tls_client_auth', 'self_signed_tls_client_auth'], default: DEFAULT_AUTH_CLIENT_AUTH }),
  AUTH_CLIENT_KEY_FILE: text('private_key_jwt: file holding the client\'s private key, PEM (PKCS#8, PKCS#1 or SEC1) or a JWK with "d"; RSA, EC P-256/P-384 or Ed25519 (re-read when it changes)'),
  AUTH_CLIENT_KEY_ALG: text('private_key_jwt: RS256, PS256, ES256, ES384 or EdDSA; from the key by default (RS256 for RSA)', { enum: KEY_ALGORITHMS }),
  AUTH_CLIENT_KEY_ID: text('private_key_jwt: the kid of every assertion; the key\'s RFC 7638 thumbprint by default'),
  AUTH_CLIENT_ASSERTION_FILE: text('federated_jwt: file holding a JWT someone else issues and rotates (a Kubernetes projected service-account token, a SPIFFE JWT-SVID), sent as it is (re-read when it changes)'),
  AUTH_USERNAME: text('service account user name (or AUTH_USERNAME_FILE); required by the password grant and basic mode'),
  AUTH_USERNAME_FILE: text('file holding the user name (re-read when it changes)'),
  AUTH_PASSWORD: text('service account password (or AUTH_PASSWORD_FILE); required by the password grant and basic mode', { secret: true }),
  AUTH_PASSWORD_FILE: text('file holding the password (re-read when it changes)'),
  AUTH_SCOPE: text('scope sent with every grant, e.g. "openid offline_access"'),
  AUTH_TOKEN_PARAMS: text('extra form parameters for every grant, name=value&name=value percent-encoded (audience, resource...); the sidecar\'s own cannot be overridden'),
  AUTH_DPOP: { type: 'boolean', description: 'DPoP-bound tokens (RFC 9449): every token request and every proxied request carries a proof signed with a key made at start, in memory only; the client must have "Require DPoP bound tokens" on', default: DEFAULT_AUTH_DPOP },
  AUTH_DPOP_ALG: text('the DPoP key\'s algorithm: ES256 (the default: as cheap to sign as EdDSA, and the most widely accepted), EdDSA, RS256 or PS256; set, the server\'s dpop_signing_alg_values_supported must list it; unset, one it lists is used (ES256 first)', { enum: DPOP_ALGORITHMS, default: DEFAULT_AUTH_DPOP_ALG }),
  AUTH_TLS_CERT_FILE: text('a client certificate presented to the auth server (PEM, the leaf then its chain), for tls_client_auth, self_signed_tls_client_auth and certificate-bound tokens (re-read when it changes)'),
  AUTH_TLS_KEY_FILE: text('the private key of AUTH_TLS_CERT_FILE, unencrypted PEM (PKCS#8, PKCS#1 or SEC1; re-read when it changes)'),
  AUTH_TLS_CA_FILE: text('CAs (PEM) trusted for the auth server, besides Node\'s and NODE_EXTRA_CA_CERTS (re-read when it changes)'),
  AUTH_LOGOUT_ON_SHUTDOWN: { type: 'boolean', description: 'on SIGTERM, after the drain, end the auth server session (end-session endpoint, or RFC 7009 revocation), best effort within TOKEN_TIMEOUT_MS', default: DEFAULT_AUTH_LOGOUT_ON_SHUTDOWN },
  PROXY_HOST: text('address the proxy listens on; loopback so only the pod\'s containers can use it', { default: DEFAULT_PROXY_HOST }),
  PROXY_PORT: port('proxy port', DEFAULT_PROXY_PORT),
  PROXY_MAX_REQUESTS: { type: 'integer', description: 'most requests in progress at once, over all the proxy\'s listeners (PROXY_PORT, the routes\' own ports, FORWARD_PROXY_PORT); beyond it 503 {"error":"overloaded"}', default: DEFAULT_PROXY_MAX_REQUESTS, minimum: 1, maximum: 1_000_000 },
  PROXY_ROUTE_MAX_REQUESTS: { type: 'integer', description: 'most of those one route may hold, so that a hung upstream cannot take the other routes\' places: beyond it that route alone answers 503 {"error":"overloaded"}; what no route serves (the forward proxy\'s tunnels) has a share too; 0: half of PROXY_MAX_REQUESTS when there are named routes or the forward proxy, all of it otherwise', default: 0, minimum: 0, maximum: 1_000_000 },
  PROXY_MAX_CONNECTIONS: { type: 'integer', description: 'most client connections open at once on each proxy listener; a new one beyond it closes the oldest idle one, or is closed when none is idle; lowered at start to fit the file descriptor limit (ulimit -n)', default: DEFAULT_PROXY_MAX_CONNECTIONS, minimum: 1, maximum: 1_000_000 },
  FORWARD_PROXY_PORT: { type: 'integer', description: 'an HTTP forward proxy on PROXY_HOST at this port, for applications that cannot be pointed at the sidecar (HTTPS_PROXY=http://127.0.0.1:<port>): a request for a URL under a route\'s BASE_URL gets that route\'s credential; unset: off', minimum: 0, maximum: 65535 },
  FORWARD_PROXY_CA_CERT_FILE: text('the CA (PEM) that signs the certificates the forward proxy presents for the routes\' https hosts, which the application trusts; required with an https route (re-read when it changes)'),
  FORWARD_PROXY_CA_KEY_FILE: text('the private key of FORWARD_PROXY_CA_CERT_FILE, unencrypted PEM: EC P-256 or P-384, RSA or Ed25519 (re-read when it changes)'),
  FORWARD_PROXY_ALLOW: text('other destinations the application may reach through the forward proxy, untouched and without a credential: comma-separated host, *.domain, host:port or IP patterns; loopback, link-local and unspecified addresses only through an IP pattern'),
  ADMIN_HOST: text('address of the health, readiness and metrics listener', { default: DEFAULT_ADMIN_HOST }),
  ADMIN_PORT: port('admin port', DEFAULT_ADMIN_PORT),
  ADMIN_MAX_CONNECTIONS: { type: 'integer', description: 'most connections open at once on the admin listener, which listens beyond the pod: the same shedding of idle ones as PROXY_MAX_CONNECTIONS', default: DEFAULT_ADMIN_MAX_CONNECTIONS, minimum: 1, maximum: 65535 },
  LOG_LEVEL: text('pino log level; debug adds each token request and answer, retry decisions and upstream connection events', { enum: LOG_LEVELS, default: DEFAULT_LOG_LEVEL }),
  ACCESS_LOG: { type: 'boolean', description: 'one log line per proxied request; false keeps only token and error events', default: DEFAULT_ACCESS_LOG },
  UPSTREAM_TIMEOUT_MS: millis('longest wait for the upstream\'s response headers, a wait for a free connection included, then 504', DEFAULT_UPSTREAM_TIMEOUT_MS),
  UPSTREAM_IDLE_TIMEOUT_MS: millis('longest silence inside a response body before it is cut; 0 for never', DEFAULT_UPSTREAM_IDLE_TIMEOUT_MS, 0),
  UPSTREAM_CONNECTIONS: { type: 'integer', description: 'most connections kept open to the upstream', default: DEFAULT_UPSTREAM_CONNECTIONS, minimum: 1, maximum: 65535 },
  UPSTREAM_KEEPALIVE_MS: millis('how long an idle pooled upstream connection is kept when the upstream does not announce its own keep-alive timeout (an announced `Keep-Alive: timeout=N` is honoured, less 2 s, up to 60 s); keep it below the upstream\'s timeout', DEFAULT_UPSTREAM_KEEPALIVE_MS),
  UPSTREAM_TLS_CERT_FILE: text('a client certificate presented to the upstream (PEM, the leaf then its chain); re-read when it changes, new connections then use it'),
  UPSTREAM_TLS_KEY_FILE: text('the private key of UPSTREAM_TLS_CERT_FILE, unencrypted PEM (PKCS#8, PKCS#1 or SEC1; re-read when it changes)'),
  UPSTREAM_TLS_CA_FILE: text('CAs (PEM) trusted for the upstream, besides Node\'s and NODE_EXTRA_CA_CERTS (re-read when it changes)'),
  WEBSOCKET_MAX_MESSAGE_BYTES: { type: 'integer', description: 'largest WebSocket message relayed either way; a larger one closes the session with 1009 (message too big)', default: DEFAULT_WEBSOCKET_MAX_MESSAGE_BYTES, minimum: 1, maximum: 104_857_600 },
  TOKEN_TIMEOUT_MS: millis('longest wait for one token request', DEFAULT_TOKEN_TIMEOUT_MS),
  TOKEN_WAIT_MS: millis('longest a proxied request waits for a token being obtained, then 503', DEFAULT_TOKEN_WAIT_MS, 0),
  TOKEN_RETRY_MIN_MS: millis('first retry delay after an auth-server outage (doubles each time, jittered)', DEFAULT_TOKEN_RETRY_MIN_MS),
  TOKEN_RETRY_MAX_MS: millis('longest retry delay after an auth-server outage', DEFAULT_TOKEN_RETRY_MAX_MS),
  TOKEN_REJECTED_RETRY_MS: millis('retry delay after the credentials were rejected (protects against brute-force lockout)', DEFAULT_TOKEN_REJECTED_RETRY_MS),
  SHUTDOWN_GRACE_MS: millis('how long in-flight requests may finish after SIGTERM', DEFAULT_SHUTDOWN_GRACE_MS, 0)
} satisfies Record<string, Property>

export type VariableName = keyof typeof properties

/** The JSON schema env-schema validates against (our own `secret` marker removed). */
export const envJsonSchema = {
  type: 'object',
  properties: Object.fromEntries(Object.entries(properties).map(([name, p]) => {
    const { secret: _secret, required: _required, ...schema } = p as Property
    return [name, schema]
  })),
  required: []
}

export const SECRET_VARIABLES: ReadonlySet<string> = new Set(
  Object.entries(properties).filter(([, p]) => (p as Property).secret).map(([name]) => name)
)
