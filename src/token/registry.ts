import type pino from 'pino'
import { CredentialStore } from '../config/credentials.js'
import type { Config, CredentialConfig } from '../config/load.js'
import type { SecretScrubber } from '../secrets.js'
import { BasicCredential } from './basic.js'
import { ClientAuthenticator } from './client-auth.js'
import type { Clock } from './clock.js'
import { DpopKey } from './dpop.js'
import { createDispatcher } from '../dispatcher.js'
import { TlsDispatcher } from '../tls/dispatchers.js'
import { authFetch, MAX_ANSWER_BYTES, type AuthFetch } from './http.js'
import { TokenExchange } from './exchange.js'
import { TokenLifecycle } from './lifecycle.js'
import { OwnGrants } from './own-grants.js'
import { OAuthClient } from './oauth-client.js'
import type { TokenSource } from './source.js'
import type { TlsFiles, TlsFileSets } from '../tls/files.js'
import type { Tracing } from '../tracing/tracing.js'

/** A credential as the sidecar holds it: a token kept fresh (oauth2), or fixed Basic credentials. */
export type HeldCredential = TokenLifecycle | BasicCredential

/** What the credentials share: the settings, the TLS files, the scrubber, time, the log. */
export interface CredentialDeps {
  config: Config
  tls: TlsFileSets
  secrets: SecretScrubber
  clock: Clock
  log: pino.Logger
  /** replaces the HTTP client of the auth server (tests) */
  fetch?: AuthFetch
  /** a span for each grant and its requests; none by default */
  tracing?: Tracing
}

/**
 * The credentials the routes use, one per distinct configuration (routes
 * that share one hold the same object): each with its secrets' store and
 * its own connections to the auth server, so that one credential's hanging
 * requests never hold up another's. An exchanged credential shares its
 * subject's client authentication and DPoP key.
 */
export class CredentialRegistry {
  readonly #deps: CredentialDeps
  readonly #held = new Map<CredentialConfig, HeldCredential>()
  /** what a credential's auth server client is made of, for the exchanges of its token */
  readonly #clients = new Map<CredentialConfig, () => OAuthClient>()
  /** each oauth2 credential's TLS files for the auth server */
  readonly #tls = new Map<CredentialConfig, TlsFiles | undefined>()
  readonly #stores: CredentialStore[] = []
  /** the auth server connections, a set per OAuth client */
  readonly #connections: TlsDispatcher[] = []

  constructor (deps: CredentialDeps) {
    this.#deps = deps
  }

  /** Every credential, in the order they were made (a subject before its exchanges). */
  get all (): Array<{ config: CredentialConfig, credential: HeldCredential }> {
    return [...this.#held].map(([config, credential]) => ({ config, credential }))
  }

  /** The credential of `config`, made once. */
  async of (config: CredentialConfig): Promise<HeldCredential> {
    const held = this.#held.get(config)
    if (held !== undefined) return held
    const made = await this.#make(config)
    this.#held.set(config, made)
    return made
  }

  /** The client certificates the credentials present to the auth server, each under the route whose settings define it. */
  get certificates (): Array<{ which: 'auth', route: string, files: TlsFiles }> {
    return [...this.#tls].flatMap(([config, files]) => files?.certificate === undefined ? [] : [{ which: 'auth' as const, route: config.name, files }])
  }

  /** Every credential, started. */
  start (): void {
    for (const credential of this.#held.values()) credential.start()
  }

  /**
   * Stops every credential, then ends the sessions they opened (where
   * AUTH_LOGOUT_ON_SHUTDOWN allows: one request each, TOKEN_TIMEOUT_MS at
   * most, even when the drain took the whole grace period), then closes
   * the connections to the auth server.
   */
  async close (): Promise<void> {
    for (const credential of this.#held.values()) credential.stop()
    for (const store of this.#stores) store.close()
    await Promise.all(this.all.map(async ({ config, credential }) => {
      if (config.auth.mode === 'oauth2' && config.auth.logoutOnShutdown) await credential.endSession(this.#deps.config.token.timeoutMs)
    }))
    await Promise.all(this.#connections.map(async (connections) => await connections.destroy()))
  }

  /**
   * A new HTTP client of the auth server, its connections its own (one
   * credential's hanging requests never hold up another's), presenting and
   * trusting what `tls` says (Node's defaults without), and its last
   * refusal of the certificate.
   */
  #http (tls: TlsFiles | undefined): { fetch: AuthFetch, refusal: () => string | undefined } {
    if (this.#deps.fetch !== undefined) return { fetch: this.#deps.fetch, refusal: () => undefined }
    const connections = new TlsDispatcher((connect, onTlsError) => createDispatcher(this.#deps.config.egress, undefined, { connections: 2, keepAliveTimeout: 4_000, maxResponseSize: MAX_ANSWER_BYTES }, connect, onTlsError), tls)
    this.#connections.push(connections)
    return { fetch: authFetch(connections), refusal: () => connections.refusal() }
  }

  async #make (config: CredentialConfig): Promise<HeldCredential> {
    const { config: global, clock, secrets } = this.#deps
    const log = this.#deps.log.child({ component: 'token', ...(config.name !== 'default' && { route: config.name }) })
    const exchange = config.exchange
    if (exchange !== undefined) {
      const subject = await this.of(exchange.subject)
      if (!(subject instanceof TokenLifecycle)) throw new Error(`route ${config.name}: an exchange needs an oauth2 credential to exchange`)
      const source = new TokenExchange({
        server: this.#clients.get(exchange.subject)!(),
        subject,
        audience: exchange.audience,
        ...(exchange.scope !== undefined && { scope: exchange.scope }),
        log,
        secrets
      })
      const manager = this.#lifecycle(source, config.name, log, clock, secrets, global)
      // the exchange is made over its subject's connections, with its certificate
      const tls = this.#tls.get(exchange.subject)
      if (tls?.certificate !== undefined) tls.on('change', () => manager.certificateChanged())
      return manager
    }
    const store = new CredentialStore(config.sources, (message) => log.warn({ event: 'credentials' }, message))
    this.#stores.push(store)
    if (config.auth.mode === 'basic') return await BasicCredential.create(store)
    const { tokenUrl, issuerUrl, discoveryUrl, alternateTokenUrl, grantType, clientAuth, clientId, clientKeyAlg, clientKeyId, scope, params, dpop, dpopAlgSet } = config.auth
    const tls = config.auth.tls === undefined ? undefined : await this.#deps.tls.of(config.auth.tls, config.name === 'default' ? 'auth' : `auth (route ${config.name})`)
    const dpopKey = dpop === undefined ? undefined : await DpopKey.generate(dpop)
    const client = new ClientAuthenticator({
      clientId,
      clientAuth,
      ...(clientKeyAlg !== undefined && { keyAlg: clientKeyAlg }),
      ...(clientKeyId !== undefined && { keyId: clientKeyId }),
      onSecret: (value) => secrets.addToken(value)
    })
    const made = (): OAuthClient => {
      const connections = this.#http(tls)
      return new OAuthClient({
      ...(tokenUrl !== undefined && { tokenUrl }),
      ...(issuerUrl !== undefined && { issuerUrl }),
      ...(discoveryUrl !== undefined && { discoveryUrl }),
      ...(alternateTokenUrl !== undefined && { alternateTokenUrl }),
      grantType,
      clientId,
      client,
      extras: { params, ...(scope !== undefined && { scope }) },
      credentials: store,
      fetch: connections.fetch,
      tls: { unusable: () => tls?.unusable(), presents: tls?.certificate !== undefined, refusal: connections.refusal },
      timeoutMs: global.token.timeoutMs,
      ...(dpopKey !== undefined && { dpop: dpopKey, dpopAlgSet: dpopAlgSet === true }),
      clock,
      log,
      secrets
      })
    }
    this.#clients.set(config, made)
    this.#tls.set(config, tls)
    const manager = this.#lifecycle(new OwnGrants({ server: made(), credentials: store, clock, log, secrets }), config.name, log, clock, secrets, global)
    if (tls?.certificate !== undefined) tls.on('change', () => manager.certificateChanged())
    return manager
  }

  #lifecycle (source: TokenSource, route: string, log: pino.Logger, clock: Clock, secrets: SecretScrubber, config: Config): TokenLifecycle {
    return new TokenLifecycle({
      source,
      route,
      ...(this.#deps.tracing !== undefined && { tracing: this.#deps.tracing }),
      log,
      waitMs: config.token.waitMs,
      retryMinMs: config.token.retryMinMs,
      retryMaxMs: config.token.retryMaxMs,
      rejectedRetryMs: config.token.rejectedRetryMs,
      clock,
      secrets
    })
  }
}
