import type { KeyAlgorithm } from './client-key.js'
import type { TlsNames } from './pem.js'
import type { DPOP_ALGORITHMS, VariableName } from './schema.js'

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent'

/** The grant that obtains a token from the configured credentials (AUTH_GRANT_TYPE). */
export type PrimaryGrant = 'password' | 'client_credentials'

/** How the client authenticates to the token endpoint (AUTH_CLIENT_AUTH). */
export type ClientAuth = 'client_secret_post' | 'client_secret_basic' | 'private_key_jwt' | 'client_secret_jwt' | 'federated_jwt' | 'tls_client_auth' | 'self_signed_tls_client_auth'

/** TLS files for the connections to one server: a client certificate and its key, extra trusted CAs (absolute paths), and the variables that named them. */
export interface TlsPaths {
  certFile?: string
  keyFile?: string
  caFile?: string
  names: TlsNames
}

/** The DPoP key's algorithm (AUTH_DPOP_ALG). */
export type DpopAlgorithm = typeof DPOP_ALGORITHMS[number]

/** Where one credential comes from: a literal value or a file re-read on change. */
export interface CredentialSource {
  variable: VariableName
  value?: string
  file?: string
}

/** Where each of one credential's secrets comes from; absent: not used by its grant and client authentication. */
export interface CredentialSources {
  /** absent with client_credentials */
  username?: CredentialSource
  password?: CredentialSource
  clientSecret?: CredentialSource
  /** private_key_jwt: the key file */
  clientKey?: CredentialSource
  /** federated_jwt: the assertion file */
  clientAssertion?: CredentialSource
}

export interface OAuth2Settings {
  mode: 'oauth2'
  /** undefined: it comes from discovery (issuerUrl) */
  tokenUrl?: string
  /** AUTH_ISSUER_URL: discovery of the token, end-session and revocation endpoints; the issuer the document must name */
  issuerUrl?: string
  /** with issuerUrl: the URL the discovery document is fetched from (AUTH_DISCOVERY_URL's, else the issuer's well-known URL) */
  discoveryUrl?: string
  /**
   * The same realm's token URL in Keycloak's other layout (with or without
   * `/auth`), tried once should `tokenUrl` not be a token endpoint; only when
   * the URL was derived from AUTH_URL, never when AUTH_TOKEN_URL was given.
   */
  alternateTokenUrl?: string
  grantType: PrimaryGrant
  clientAuth: ClientAuth
  /** private_key_jwt: AUTH_CLIENT_KEY_ALG and AUTH_CLIENT_KEY_ID, when set */
  clientKeyAlg?: KeyAlgorithm
  clientKeyId?: string
  clientId: string
  scope?: string
  /** AUTH_TOKEN_PARAMS, decoded, in order (a name may repeat: RFC 8707 resource) */
  params: Array<[string, string]>
  logoutOnShutdown: boolean
  /** AUTH_DPOP: the algorithm of the DPoP key; undefined for bearer tokens */
  dpop?: DpopAlgorithm
  /** AUTH_DPOP_ALG was set: the server must offer it (unset, one it offers is chosen) */
  dpopAlgSet?: true
  /** AUTH_TLS_*: what the connections to the auth server present and trust; undefined for Node's defaults */
  tls?: TlsPaths
}

/** How a credential's token is obtained (AUTH_MODE=oauth2), or that it is Basic credentials sent as they are. */
export type CredentialAuth = OAuth2Settings | { mode: 'basic' }

/**
 * One credential: how its token is obtained and where its secrets come
 * from. Routes that share one hold the same object.
 */
export interface CredentialConfig {
  /** the route whose settings define it: `default` for the default route's */
  name: string
  /** a named route's AUTH_* settings by the variables that set them (AUTH_CLIENT_ID: ROUTE_BILLING_AUTH_CLIENT_ID), so that what is said of them names those */
  setBy?: Readonly<Record<string, string>>
  auth: CredentialAuth
  sources: CredentialSources
  /** its token is obtained by token exchange (RFC 8693) of `subject`'s */
  exchange?: { subject: CredentialConfig, audience: string, scope?: string }
}

/** One route: an upstream, where it is served, and the credential its token comes from. */
export interface RouteConfig {
  /** `default`, or the route's name in lower case */
  name: string
  /** the variables its settings came from, for what is said of them */
  variables: { baseUrl: string, port?: string, path?: string }
  /** `scheme://host[:port]` of its BASE_URL, the only origin its token is ever sent to */
  origin: string
  /** its BASE_URL's path without the trailing slash; '' for none */
  basePath: string
  /** its own port on PROXY_HOST; undefined: served on PROXY_PORT */
  port?: number
  /** its prefix on PROXY_PORT ('' for the default route and the routes with a port) */
  path: string
  credential: CredentialConfig
  /** UPSTREAM_TLS_* (its own, else the default route's): what its upstream connections present and trust */
  tls?: TlsPaths
}

/** A destination the forward proxy lets through untouched (FORWARD_PROXY_ALLOW): a host, a domain's hosts (`*.domain`) or an IP address, with a port or any. */
export interface AllowPattern {
  /** the host or address in lower case; for a domain, the domain without `*.` */
  host: string
  kind: 'host' | 'domain' | 'ip'
  port?: number
}

export interface ForwardSettings {
  port: number
  /** the CA the intercepted hosts' certificates are signed with; required when a route is https */
  ca?: { certFile: string, keyFile: string, names: { cert: string, key: string } }
  allow: AllowPattern[]
}

/** What every route's upstream connections share (UPSTREAM_*); where each route goes is its own (RouteConfig). */
export interface UpstreamSettings {
  timeoutMs: number
  idleTimeoutMs: number
  connections: number
  keepAliveMs: number
}

export interface Config {
  upstream: UpstreamSettings
  token: {
    timeoutMs: number
    waitMs: number
    retryMinMs: number
    retryMaxMs: number
    rejectedRetryMs: number
  }
  proxy: { host: string, port: number, maxRequests: number, websocketMaxMessageBytes: number }
  admin: { host: string, port: number }
  /** what one client can hold: PROXY_ROUTE_MAX_REQUESTS (resolved), PROXY_MAX_CONNECTIONS, ADMIN_MAX_CONNECTIONS */
  bounds: { routeMaxRequests: number, proxyConnections: number, adminConnections: number }
  logLevel: LogLevel
  accessLog: boolean
  shutdownGraceMs: number
  /** every route, the default route first: its BASE_URL and AUTH_* settings are routes[0]'s */
  routes: RouteConfig[]
  /** corporate egress proxy (HTTPS_PROXY, HTTP_PROXY, NO_PROXY, any case), for the upstream and the auth server */
  egress: { httpProxy?: string, httpsProxy?: string, noProxy?: string }
  /** NODE_EXTRA_CA_CERTS (the process's environment only: Node reads it at start), whose CAs a CA file's are trusted with */
  extraCaFile?: string
  /** FORWARD_PROXY_*: the forward proxy, when it is on */
  forward?: ForwardSettings
  /** OpenTelemetry tracing, when OTEL_TRACES_EXPORTER names an exporter */
  tracing?: TracingSettings
  /** things worth telling the operator that do not stop the start (misspelt names, say) */
  /** CONFIG_FILE, when set: its absolute path, and the settings of it the environment overrides */
  file?: { path: string, overridden: string[] }
  /** every variable as set (the environment's, the file's, .env's), for telling what a new version changes; holds secrets */
  variables: Record<string, string>
  warnings: string[]
}

/**
 * Tracing as the sidecar sees it: on or off, and the service's default
 * name. The OpenTelemetry SDK reads its OTEL_* variables (exporter, sampler,
 * propagators, endpoints) from the process's environment itself.
 */
export interface TracingSettings {
  /** OTEL_TRACES_EXPORTER: otlp, zipkin, console... */
  exporter: string
  /** `auth-sidecar`, when neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES names the service */
  serviceName: string | undefined
}
