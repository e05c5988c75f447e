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

/** What every credential shares of the configuration: TOKEN_* and the egress proxy. */
export type CredentialSettings = Pick<Config, 'token' | 'egress'>

/** One credential and what it is made of. */
interface Held {
  config: CredentialConfig
  credential: HeldCredential
  /** its secrets, re-read when their files change; an exchange has its subject's */
  store?: CredentialStore
  /** what its auth server client is made of, for the exchanges of its token (each with connections of its own) */
  client?: (connections: TlsDispatcher[]) => OAuthClient
  /** its TLS files for the auth server, released when it stops; an exchange has its subject's */
  tls?: TlsFiles | undefined
  /** stops following its TLS files' changes */
  unfollow?: () => void
  /** the connections to the auth server it made */
  connections: TlsDispatcher[]
  /** the settings every credential shares, as it was made with */
  global: CredentialSettings
  /** TOKEN_TIMEOUT_MS as it was made with, for ending its session */
  timeoutMs: number
  /** an exchange's subject, by its key */
  subject?: string
}

/**
 * A credential's identity: its settings and those every credential shares
 * (TOKEN_*, the egress proxy). A new configuration with the same keeps the
 * credential, and so its token.
 */
export function credentialKey (config: CredentialConfig, global: CredentialSettings): string {
  const { name: _name, setBy: _setBy, ...settings } = config
  return JSON.stringify([settings, global.token, global.egress])
}

/** Whom a credential's grants speak for: the auth server, the client and the user, however else its settings differ. */
function accountOf (config: CredentialConfig): string {
  const { auth, sources } = config
  if (auth.mode !== 'oauth2') return JSON.stringify(['basic', sources.username])
  return JSON.stringify([auth.tokenUrl ?? auth.discoveryUrl ?? auth.issuerUrl, auth.clientId, sources.username, config.exchange?.audience])
}

/** A credential as the sidecar holds it: a token kept fresh (oauth2), or fixed Basic credentials. */
export type HeldCredential = TokenLifecycle | BasicCredential

/** What the credentials share: the settings, the TLS files, the scrubber, time, the log. */
export interface CredentialDeps {
  /** the settings of the configuration in use, for the credentials `of` makes without others */
  config: CredentialSettings
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
  /** by credentialKey: one object per distinct configuration, kept across new versions of it */
  readonly #held = new Map<string, Held>()
  #started = false
  #closed = false
  /**
   * When an account whose grant was rejected may be tried again, by
   * accountOf: a credential made anew for it (a new configuration) waits as
   * the one it replaces would have, so that reloads cannot hammer the auth
   * server with a refused password (and trip its lockout).
   */
  readonly #rejectedUntil = new Map<string, number>()

  constructor (deps: CredentialDeps) {
    this.#deps = deps
  }

  /** Every credential, in the order they were made (a subject before its exchanges), with the TLS files it presents to the auth server. */
  get all (): Array<{ config: CredentialConfig, credential: HeldCredential, tls: TlsFiles | undefined }> {
    return [...this.#held.values()].map(({ config, credential, tls }) => ({ config, credential, tls }))
  }

  /**
   * The credential of `config` under the settings `global` gives every
   * credential (TOKEN_*, the egress proxy): the one made before for the
   * same settings, or a new one, started when the others are.
   */
  async of (config: CredentialConfig, global: CredentialSettings = this.#deps.config): Promise<HeldCredential> {
    const key = credentialKey(config, global)
    const held = this.#held.get(key)
    if (held !== undefined) return held.credential
    if (this.#closed) throw new Error('the credentials are closed: the sidecar is shutting down')
    const made = await this.#make(config, global)
    this.#held.set(key, made)
    const account = accountOf(config)
    made.credential.events.on('grant', (_grant, outcome) => {
      if (outcome === 'rejected') this.#rejectedUntil.set(account, this.#deps.clock.now() + global.token.rejectedRetryMs)
      else if (outcome === 'success') this.#rejectedUntil.delete(account)
    })
    if (this.#started) this.#startPaced(made, account)
    return made.credential
  }

  /** Starts a credential, once its account's last rejection allows. */
  #startPaced (held: Held, account: string): void {
    const wait = (this.#rejectedUntil.get(account) ?? 0) - this.#deps.clock.now()
    if (wait <= 0) return held.credential.start()
    this.#deps.log.info({ event: 'token', route: held.config.name, retryInMs: Math.round(wait) }, 'the credentials were rejected before this configuration: the first grant waits its turn')
    this.#deps.clock.setTimeout(() => { if (this.#held.get(credentialKey(held.config, held.global)) === held) held.credential.start() }, wait)
  }

  /** The client certificates the credentials present to the auth server, each under the route whose settings define it. */
  get certificates (): Array<{ which: 'auth', route: string, files: TlsFiles }> {
    return [...this.#held.values()].flatMap(({ config, tls }) => tls?.certificate === undefined ? [] : [{ which: 'auth' as const, route: config.name, files: tls }])
  }

  /** Every credential, started. */
  start (): void {
    this.#started = true
    for (const { credential } of this.#held.values()) credential.start()
  }

  /**
   * Stops the credentials no route holds any more (`inUse`, with the
   * subjects of their exchanges) and ends their sessions as close does,
   * in the background; returns those stopped.
   */
  retain (inUse: ReadonlySet<HeldCredential>): HeldCredential[] {
    const kept = new Set<string>()
    for (const [key, held] of this.#held) {
      if (!inUse.has(held.credential)) continue
      for (let k: string | undefined = key; k !== undefined; k = this.#held.get(k)?.subject) kept.add(k)
    }
    const gone = [...this.#held].filter(([key]) => !kept.has(key))
    for (const [key] of gone) this.#held.delete(key)
    for (const [, held] of gone) this.#end(held).catch((err: unknown) => { this.#deps.log.warn({ err: { type: (err as Error).name } }, 'a credential no route uses could not be closed') })
    return gone.map(([, held]) => held.credential)
  }

  /**
   * Stops every credential, then ends the sessions they opened (where
   * AUTH_LOGOUT_ON_SHUTDOWN allows: one request each, TOKEN_TIMEOUT_MS at
   * most, even when the drain took the whole grace period), then closes
   * the connections to the auth server.
   */
  async close (): Promise<void> {
    this.#closed = true
    const all = [...this.#held.values()]
    for (const held of all) held.credential.stop()
    await Promise.all(all.map(async (held) => await this.#end(held)))
  }

  async #end (held: Held): Promise<void> {
    held.credential.stop()
    held.store?.close()
    held.unfollow?.()
    if (held.tls !== undefined) this.#deps.tls.release(held.tls)
    if (held.config.auth.mode === 'oauth2' && held.config.auth.logoutOnShutdown) await held.credential.endSession(held.timeoutMs)
    await Promise.all(held.connections.map(async (connections) => await connections.destroy()))
  }

  /**
   * A new HTTP client of the auth server, its connections its own (one
   * credential's hanging requests never hold up another's), presenting and
   * trusting what `tls` says (Node's defaults without), and its last
   * refusal of the certificate.
   */
  #http (tls: TlsFiles | undefined, global: CredentialSettings, connections: TlsDispatcher[]): { fetch: AuthFetch, refusal: () => string | undefined } {
    if (this.#deps.fetch !== undefined) return { fetch: this.#deps.fetch, refusal: () => undefined }
    const made = new TlsDispatcher((connect, onTlsError) => ({ dispatcher: createDispatcher(global.egress, { connections: 2, keepAliveTimeout: 4_000, maxResponseSize: MAX_ANSWER_BYTES }, connect, onTlsError) }), tls)
    connections.push(made)
    return { fetch: authFetch(made), refusal: () => made.refusal() }
  }

  async #make (config: CredentialConfig, global: CredentialSettings): Promise<Held> {
    const { clock, secrets } = this.#deps
    const log = this.#deps.log.child({ component: 'token', ...(config.name !== 'default' && { route: config.name }) })
    const exchange = config.exchange
    const held = { config, global, timeoutMs: global.token.timeoutMs, connections: [] as TlsDispatcher[] }
    const setBy = config.setBy === undefined ? {} : { setBy: config.setBy }
    if (exchange !== undefined) {
      await this.of(exchange.subject, global)
      const subjectKey = credentialKey(exchange.subject, global)
      const { credential: subject, client, tls } = this.#held.get(subjectKey)!
      if (!(subject instanceof TokenLifecycle) || client === undefined) throw new Error(`route ${config.name}: an exchange needs an oauth2 credential to exchange`)
      const source = new TokenExchange({
        server: client(held.connections),
        subject,
        audience: exchange.audience,
        ...(exchange.scope !== undefined && { scope: exchange.scope }),
        log,
        secrets,
        ...setBy
      })
      const manager = this.#lifecycle(source, config, log, clock, secrets, global.token)
      // the exchange is made with its subject's certificate
      return { ...held, credential: manager, subject: subjectKey, ...(tls?.certificate !== undefined && { unfollow: follow(tls, manager) }) }
    }
    const store = new CredentialStore(config.sources, (message) => log.warn({ event: 'credentials' }, message))
    if (config.auth.mode === 'basic') return { ...held, store, credential: await BasicCredential.create(store) }
    const { tokenUrl, issuerUrl, discoveryUrl, alternateTokenUrl, grantType, clientAuth, clientId, clientKeyAlg, clientKeyId, scope, params, dpop, dpopAlgSet } = config.auth
    const dpopKey = dpop === undefined ? undefined : await DpopKey.generate(dpop)
    const client = new ClientAuthenticator({
      clientId,
      clientAuth,
      ...(clientKeyAlg !== undefined && { keyAlg: clientKeyAlg }),
      ...(clientKeyId !== undefined && { keyId: clientKeyId }),
      onSecret: (value) => secrets.addToken(value)
    })
    // taken last, after what can fail: a credential not made holds no TLS files
    const tls = config.auth.tls === undefined ? undefined : await this.#deps.tls.of(config.auth.tls, config.name === 'default' ? 'auth' : `auth (route ${config.name})`)
    const made = (connections: TlsDispatcher[]): OAuthClient => {
      const http = this.#http(tls, global, connections)
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
      fetch: http.fetch,
      tls: { unusable: () => tls?.unusable(), presents: tls?.certificate !== undefined, refusal: http.refusal },
      timeoutMs: global.token.timeoutMs,
      ...(dpopKey !== undefined && { dpop: dpopKey, dpopAlgSet: dpopAlgSet === true }),
      clock,
      log,
      secrets,
      ...setBy
      })
    }
    const manager = this.#lifecycle(new OwnGrants({ server: made(held.connections), credentials: store, clock, log, secrets, ...setBy }), config, log, clock, secrets, global.token)
    return { ...held, store, credential: manager, client: made, tls, ...(tls?.certificate !== undefined && { unfollow: follow(tls, manager) }) }
  }

  #lifecycle (source: TokenSource, config: CredentialConfig, log: pino.Logger, clock: Clock, secrets: SecretScrubber, token: Config['token']): TokenLifecycle {
    return new TokenLifecycle({
      source,
      route: config.name,
      ...(config.setBy !== undefined && { setBy: config.setBy }),
      ...(this.#deps.tracing !== undefined && { tracing: this.#deps.tracing }),
      log,
      waitMs: token.waitMs,
      retryMinMs: token.retryMinMs,
      retryMaxMs: token.retryMaxMs,
      rejectedRetryMs: token.rejectedRetryMs,
      clock,
      secrets
    })
  }
}

/** Tells `manager` of each renewal of the certificate in `tls` (its token may be bound to the one before); returns what stops it. */
function follow (tls: TlsFiles, manager: TokenLifecycle): () => void {
  const changed = (): void => manager.certificateChanged()
  tls.on('change', changed)
  return () => { tls.off('change', changed) }
}
