import type { KeyAlgorithm } from './client-key.js'
import type { DPOP_ALGORITHMS, VariableName } from './schema.js'

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent'

/** The grant that obtains a token from the configured credentials (AUTH_GRANT_TYPE). */
export type PrimaryGrant = 'password' | 'client_credentials'

/** How the client authenticates to the token endpoint (AUTH_CLIENT_AUTH). */
export type ClientAuth = 'client_secret_post' | 'client_secret_basic' | 'private_key_jwt' | 'client_secret_jwt' | 'federated_jwt'

/** The DPoP key's algorithm (AUTH_DPOP_ALG). */
export type DpopAlgorithm = typeof DPOP_ALGORITHMS[number]

/** Where one credential comes from: a literal value or a file re-read on change. */
export interface CredentialSource {
  variable: VariableName
  value?: string
  file?: string
}

export interface OAuth2Settings {
  mode: 'oauth2'
  /** undefined: it comes from discovery (issuerUrl) */
  tokenUrl?: string
  /** AUTH_ISSUER_URL: discovery of the token, end-session and revocation endpoints */
  issuerUrl?: string
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
}

export interface Config {
  upstream: {
    /** `scheme://host[:port]`, the only origin the token is ever sent to */
    origin: string
    /** path prefix of BASE_URL without its trailing slash; '' for none */
    basePath: string
    timeoutMs: number
    idleTimeoutMs: number
    connections: number
    keepAliveMs: number
  }
  auth: OAuth2Settings | { mode: 'basic' }
  credentials: {
    /** absent with client_credentials */
    username?: CredentialSource
    password?: CredentialSource
    clientSecret?: CredentialSource
    /** private_key_jwt: the key file */
    clientKey?: CredentialSource
    /** federated_jwt: the assertion file */
    clientAssertion?: CredentialSource
  }
  token: {
    timeoutMs: number
    waitMs: number
    retryMinMs: number
    retryMaxMs: number
    rejectedRetryMs: number
  }
  proxy: { host: string, port: number, maxRequests: number, websocketMaxMessageBytes: number }
  admin: { host: string, port: number }
  logLevel: LogLevel
  accessLog: boolean
  shutdownGraceMs: number
  /** corporate egress proxy (HTTPS_PROXY, HTTP_PROXY, NO_PROXY, any case), for the upstream and the auth server */
  egress: { httpProxy?: string, httpsProxy?: string, noProxy?: string }
  /** things worth telling the operator that do not stop the start (misspelt names, say) */
  warnings: string[]
}
