import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { root, runDir } from '../keycloak/run-dir.js'

/** Keycloak as test/keycloak/before.ts started it for this run. */
interface RunState {
  status: 'starting' | 'ready' | 'failed' | 'off'
  version?: string
  reason?: string
  /** while starting: when the servers' time runs out (ms since the epoch), once the supervisor started them */
  readyBy?: number
  admin?: { username: string, password: string }
  servers?: Record<ServerName, { url: string, httpsUrl?: string, caDir?: string, publicUrl?: string, log: string }>
}

export type Layout = 'root' | 'auth'
/**
 * The run's servers: one per path layout, and one whose hostname is a
 * public URL the tests never dial, with tracing on (its log lines carry
 * each request's trace id).
 */
export type ServerName = Layout | 'hostname'
export type Servers = Record<ServerName, KeycloakServer>

/** tap's time for one test file, from its start (the runner passes its --timeout on in TAP_TIMEOUT, seconds; 0 is none). */
const FILE_TIMEOUT_MS = Number(process.env.TAP_TIMEOUT ?? '30') * 1000
/** Past the supervisor's deadline, the moment it takes to write its verdict. */
const VERDICT_MARGIN_MS = 30_000
/**
 * The longest a test waits for the servers: the supervisor's deadline
 * comes first, but a checkout that never ran `node scripts/keycloak.mjs
 * install` builds them before their time starts.
 */
const LONGEST_WAIT_MS = 600_000

let connected: Promise<Servers | string> | undefined

function readState (): RunState | undefined {
  try { return JSON.parse(readFileSync(join(runDir, 'state.json'), 'utf8')) as RunState } catch { return undefined }
}

function supervisorRunning (): boolean {
  try {
    process.kill(Number(readFileSync(join(runDir, 'supervisor.pid'), 'utf8')), 0)
    return true
  } catch {
    return false
  }
}

/** The run's Keycloak servers, once ready; a string says why there are none. */
async function connect (): Promise<Servers | string> {
  const started = Date.now()
  for (;;) {
    let state = readState()
    // a supervisor gone without a verdict will give none; it may have written one as it went
    if (state?.status === 'starting' && !supervisorRunning()) {
      state = readState()
      if (state?.status === 'starting') return `real Keycloak ${state.version ?? ''} unavailable: its supervisor (scripts/keycloak.mjs serve) ended before the servers were ready; its output: ${join(runDir, 'supervisor.log')}`
    }
    if (state?.status === 'ready') {
      const { admin, servers } = state as Required<RunState>
      const https = servers.root.httpsUrl !== undefined && servers.root.caDir !== undefined ? { url: servers.root.httpsUrl, caDir: servers.root.caDir } : undefined
      return {
        root: new KeycloakServer('root', servers.root.url, admin, https, undefined, servers.root.log),
        auth: new KeycloakServer('auth', servers.auth.url, admin, undefined, undefined, servers.auth.log),
        hostname: new KeycloakServer('root', servers.hostname.url, admin, undefined, servers.hostname.publicUrl, servers.hostname.log)
      }
    }
    if (state?.status === 'failed' || state?.status === 'off') return `real Keycloak ${state.version ?? ''} unavailable: ${state.reason ?? 'no reason given'}`
    if (state === undefined && Date.now() - started > 10_000) {
      return 'real Keycloak not started: tap\'s before script (test/keycloak/before.ts) did not run; run the tests with tap, as npm test does'
    }
    const waited = Date.now() - started
    if (waited > LONGEST_WAIT_MS || (state?.readyBy !== undefined && Date.now() > state.readyBy + VERDICT_MARGIN_MS)) {
      return `real Keycloak not ready after ${Math.round(waited / 1000)} s of waiting, and its supervisor gave no reason (its logs: ${runDir})`
    }
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
}

/**
 * The file's connection to the run's servers. tap's clock for the file runs
 * from its start, Keycloak's boot from the run's: while the file waits for
 * the servers, its clock is held, and it gets its whole time from the moment
 * they are there.
 */
function connection (): Promise<Servers | string> {
  if (connected === undefined) {
    connected = connect()
    if (FILE_TIMEOUT_MS > 0) {
      t.setTimeout(LONGEST_WAIT_MS + FILE_TIMEOUT_MS)
      void connected.then(() => { t.setTimeout(FILE_TIMEOUT_MS) })
    }
  }
  return connected
}

/**
 * How many of a file's Keycloak tests run at once: each has a realm of its
 * own, and they spend their time waiting, on token lifetimes and on
 * Keycloak's records.
 */
const JOBS = 4

/**
 * A test against the real Keycloak: skipped, with the reason, when it could
 * not be started here; a failure under CI=true, where it must run. Its
 * `timeout` counts from the moment the servers are there.
 */
export function keycloakTest (name: string, fn: (t: Test, kc: Servers) => Promise<void>, options: { timeout?: number } = {}): void {
  const timeout = options.timeout ?? 300_000
  const servers = connection()
  t.jobs = Math.max(t.jobs, JOBS)
  t.test(name, { timeout: LONGEST_WAIT_MS + timeout }, async (t) => {
    const kc = await servers
    t.setTimeout(timeout)
    if (typeof kc === 'string') {
      if (process.env.CI === 'true') t.fail(kc)
      else t.plan(0, kc)
      return
    }
    await fn(t, kc)
  })
}

interface Json { [key: string]: unknown }

/** One Keycloak server, through its admin REST API. */
export class KeycloakServer {
  #token: { value: string, until: number } | undefined

  /**
   * `url`: where the tests dial it. `https`: the same server over HTTPS,
   * asking for client certificates and taking those the run's CA (in
   * `caDir`, scripts/test-ca.mjs) signed. `publicUrl`: its hostname, which
   * every issuer it names is under (a public one, never dialled here).
   * `log`: the file its console output goes to.
   */
  constructor (readonly layout: Layout, readonly url: string, readonly admin: { username: string, password: string }, readonly https?: { url: string, caDir: string }, readonly publicUrl?: string, readonly log?: string) {}

  /** The admin API's answer to `method path`; throws on a status other than 2xx. */
  async api<T = unknown> (method: string, path: string, body?: unknown): Promise<T> {
    const res = await fetch(`${this.url}/admin${path}`, {
      method,
      headers: { authorization: `Bearer ${await this.#adminToken()}`, ...(body !== undefined && { 'content-type': 'application/json' }) },
      ...(body !== undefined && { body: JSON.stringify(body) })
    })
    const text = await res.text()
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 300)}`)
    return (text === '' ? undefined : JSON.parse(text)) as T
  }

  async #adminToken (): Promise<string> {
    if (this.#token !== undefined && Date.now() < this.#token.until) return this.#token.value
    const res = await fetch(`${this.url}/realms/master/protocol/openid-connect/token`, {
      method: 'POST',
      body: new URLSearchParams({ grant_type: 'password', client_id: 'admin-cli', username: this.admin.username, password: this.admin.password })
    })
    const body = await res.json() as { access_token: string, expires_in: number }
    if (!res.ok) throw new Error(`admin token: ${res.status} ${JSON.stringify(body)}`)
    this.#token = { value: body.access_token, until: Date.now() + (body.expires_in - 10) * 1000 }
    return body.access_token
  }

  /**
   * A realm of its own for a test, from test/keycloak/realm.json with
   * `changes` applied to its top-level settings; deleted in teardown.
   */
  async realm (t: Test, changes: Json = {}): Promise<Realm> {
    const template = JSON.parse(readFileSync(join(root, 'test/keycloak/realm.json'), 'utf8')) as Json
    const name = `test-${randomBytes(4).toString('hex')}`
    await this.api('POST', '/realms', { ...template, ...changes, realm: name })
    t.teardown(async () => { await this.api('DELETE', `/realms/${name}`).catch(() => {}) })
    return new Realm(this, name)
  }
}

export interface KeycloakEvent { type: string, time: number, clientId?: string, userId?: string, error?: string, details?: Record<string, string> }

/** One realm: its endpoints, and what Keycloak recorded in it. */
export class Realm {
  constructor (readonly server: KeycloakServer, readonly name: string) {}

  /** The issuer as Keycloak names it: under its public hostname, when it has one. */
  get issuer (): string { return `${this.server.publicUrl ?? this.server.url}/realms/${this.name}` }
  /** The realm at the address the tests dial (its issuer's, unless the server has a public hostname). */
  get address (): string { return `${this.server.url}/realms/${this.name}` }
  /** The issuer over HTTPS (the root layout's server only), where client certificates are taken. */
  get httpsIssuer (): string {
    if (this.server.https === undefined) throw new Error(`the ${this.server.layout} layout's Keycloak serves no HTTPS`)
    return `${this.server.https.url}/realms/${this.name}`
  }
  get tokenUrl (): string { return `${this.address}/protocol/openid-connect/token` }
  get jwksUrl (): string { return `${this.address}/protocol/openid-connect/certs` }

  async api<T = unknown> (method: string, path: string, body?: unknown): Promise<T> {
    return await this.server.api<T>(method, `/realms/${this.name}${path}`, body)
  }

  async userId (username: string): Promise<string> {
    const [user] = await this.api<Array<{ id: string }>>('GET', `/users?exact=true&username=${encodeURIComponent(username)}`)
    if (user === undefined) throw new Error(`no user ${username} in ${this.name}`)
    return user.id
  }

  /** The user's sessions as Keycloak holds them now (online ones; offline ones with `offline`). */
  async sessions (username: string, offline = false): Promise<Array<{ id: string, clients: Record<string, string> }>> {
    const id = await this.userId(username)
    return await this.api('GET', `/users/${id}/${offline ? 'offline-sessions/' + await this.clientUuid('legacy-app') : 'sessions'}`)
  }

  /** Events Keycloak recorded, oldest first, of these types if given. */
  async events (types: string[] = []): Promise<KeycloakEvent[]> {
    const query = types.map((type) => `type=${type}`).join('&')
    const events = await this.api<KeycloakEvent[]>('GET', `/events?max=1000${query === '' ? '' : `&${query}`}`)
    return events.reverse()
  }

  /** Brute-force detection's record of a user: locked out (`disabled`) and failures counted. */
  async bruteForce (username: string): Promise<{ disabled: boolean, numFailures: number }> {
    return await this.server.api('GET', `/realms/${this.name}/attack-detection/brute-force/users/${await this.userId(username)}`)
  }

  async clientUuid (clientId: string): Promise<string> {
    const [client] = await this.api<Array<{ id: string }>>('GET', `/clients?clientId=${encodeURIComponent(clientId)}`)
    if (client === undefined) throw new Error(`no client ${clientId} in ${this.name}`)
    return client.id
  }

  /** Changes a client's settings (`attributes` merged into the ones it has). */
  async updateClient (clientId: string, changes: Json): Promise<void> {
    const uuid = await this.clientUuid(clientId)
    const current = await this.api<Json>('GET', `/clients/${uuid}`)
    const attributes = { ...(current.attributes as Json | undefined), ...(changes.attributes as Json | undefined) }
    await this.api('PUT', `/clients/${uuid}`, { ...current, ...changes, attributes })
  }
}
