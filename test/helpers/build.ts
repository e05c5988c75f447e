import { request as httpRequest } from 'node:http'
import { connect } from 'node:net'
import type { Test } from 'tap'
import { buildApp, type App } from '../../src/app.js'
import { loadConfig } from '../../src/config/load.js'
import { TokenServer, type Fault, type TokenServerOptions } from '../../dev/token-server.js'
import type { Tracing } from '../../src/tracing/tracing.js'
import { captureLogger } from './log.js'
import { FakeUpstream } from './upstream.js'

export const PASSWORD = 'service-password-9f8e7d'
export const CLIENT_SECRET = 'client-secret-1a2b3c'

/** The configuration build() starts from: its upstream and token server, ports 0, short token retries. */
export function harnessEnv (h: Pick<Harness, 'tokenServer' | 'upstream'>): Record<string, string> {
  return {
    BASE_URL: `${h.upstream.url}/api`,
    AUTH_URL: h.tokenServer.url,
    AUTH_CLIENT_ID: 'legacy-app',
    AUTH_CLIENT_SECRET: CLIENT_SECRET,
    AUTH_USERNAME: 'service-user',
    AUTH_PASSWORD: PASSWORD,
    PROXY_PORT: '0',
    ADMIN_PORT: '0',
    ADMIN_HOST: '127.0.0.1',
    TOKEN_RETRY_MIN_MS: '50',
    TOKEN_RETRY_MAX_MS: '200'
  }
}

export interface Harness {
  app: App
  tokenServer: TokenServer
  upstream: FakeUpstream
  proxyUrl: string
  proxyPort: number
  /** the routes with a port of their own, by name */
  routeUrls: Record<string, string>
  /** FORWARD_PROXY_PORT's port, when it is set */
  forwardPort: number | undefined
  adminUrl: string
  log: ReturnType<typeof captureLogger>
}

/**
 * A sidecar on port 0 in front of a FakeUpstream (BASE_URL with an /api
 * prefix), against a Keycloak-like TokenServer; everything is closed in
 * teardown. `env` overrides the configuration; in a value, `{issuer}` is the
 * token server's issuer URL, `{internal}` its realm's URL at the address the
 * sidecar dials (the issuer's own unless it has a public URL) and
 * `{tokenUrl}` its token endpoint there. `deps.faults` are queued before the start.
 */
export async function build (t: Test, env: Record<string, string> = {}, tokenOptions: TokenServerOptions = {}, deps: { headersTimeoutMs?: number, faults?: Fault[], upstreamTls?: ConstructorParameters<typeof FakeUpstream>[1], tracing?: Tracing, descriptorLimit?: number } = {}): Promise<Harness> {
  const tokenServer = new TokenServer({
    clients: { 'legacy-app': CLIENT_SECRET },
    users: { 'service-user': PASSWORD },
    ...tokenOptions
  })
  await tokenServer.listen()
  const upstream = new FakeUpstream(tokenServer, deps.upstreamTls)
  await upstream.listen()
  // registered before the sidecar is built: a configuration it refuses must not leave the servers holding the test open
  let app: App | undefined
  t.teardown(async () => {
    await app?.close(500)
    await upstream.close()
    await tokenServer.close()
  })
  const config = loadConfig({
    ...harnessEnv({ tokenServer, upstream }),
    ...Object.fromEntries(Object.entries(env).map(([name, value]) => [name, typeof value !== 'string'
      ? value
      : value
        .replace('{issuer}', tokenServer.issuer)
        .replace('{internal}', tokenServer.url + tokenServer.tokenPath.replace(/\/protocol\/openid-connect\/token$/, ''))
        .replace('{tokenUrl}', tokenServer.tokenUrl)]))
  }, { cwd: '/nonexistent' })
  tokenServer.faults.push(...(deps.faults ?? []))
  const log = captureLogger()
  app = await buildApp(config, { logger: log.logger, ...(deps.headersTimeoutMs !== undefined && { headersTimeoutMs: deps.headersTimeoutMs }), ...(deps.tracing !== undefined && { tracing: deps.tracing }), ...(deps.descriptorLimit !== undefined && { descriptorLimit: deps.descriptorLimit }) })
  const { proxy, admin, routes, forward } = await app.listen()
  return {
    app,
    tokenServer,
    upstream,
    proxyUrl: `http://127.0.0.1:${proxy.port}`,
    proxyPort: proxy.port,
    routeUrls: Object.fromEntries(Object.entries(routes).map(([name, address]) => [name, `http://127.0.0.1:${address.port}`])),
    forwardPort: forward?.port,
    adminUrl: `http://127.0.0.1:${admin.port}`,
    log
  }
}

/** A sidecar whose endpoints come from discovery, with `faults` queued before it starts. */
export async function buildWithIssuer (t: Test, faults: Fault[] = [], env: Record<string, string> = {}): Promise<Harness> {
  return await build(t, { AUTH_URL: '', AUTH_ISSUER_URL: '{issuer}', ...env }, {}, { faults })
}

/** GET with fetch: status and body text. */
export async function get (url: string): Promise<{ status: number, body: string }> {
  const res = await fetch(url)
  return { status: res.status, body: await res.text() }
}

/** The value of one series in the admin port's /metrics, NaN when absent. */
export async function metric (adminUrl: string, line: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text()
  const found = text.split('\n').find((l) => l.startsWith(line + ' '))
  return found === undefined ? NaN : Number(found.slice(line.length + 1))
}

/** The admin server's metrics once `done` holds for them (a route retires after its last request), or as they are after `ms`. */
export async function scrapeUntil (adminUrl: string, done: (text: string) => boolean, ms = 5_000): Promise<string> {
  const scrape = async (): Promise<string> => await (await fetch(`${adminUrl}/metrics`)).text()
  let text = await scrape()
  for (const deadline = Date.now() + ms; !done(text) && Date.now() < deadline;) {
    await new Promise((resolve) => setTimeout(resolve, 20))
    text = await scrape()
  }
  return text
}

/** Waits until `check` is true, polling every 10 ms, failing after `ms`. */
export async function until (check: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time')
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

/** Sends bytes exactly as given (no client-side URL normalisation) and returns the raw answer. */
export function rawRequest (port: number, text: string, timeoutMs = 3_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1')
    const chunks: Buffer[] = []
    const timer = setTimeout(() => { socket.destroy(); resolve(Buffer.concat(chunks).toString()) }, timeoutMs)
    socket.on('data', (c: Buffer) => {
      chunks.push(c)
      // one response is enough: stop once a complete JSON body or an empty body arrived
      const s = Buffer.concat(chunks).toString()
      const m = s.match(/content-length: (\d+)/i)
      const head = s.indexOf('\r\n\r\n')
      if (m !== null && head !== -1 && s.length - head - 4 >= Number(m[1])) {
        clearTimeout(timer)
        socket.destroy()
        resolve(s)
      }
    })
    socket.on('end', () => { clearTimeout(timer); resolve(Buffer.concat(chunks).toString()) })
    socket.on('error', reject)
    socket.write(text)
  })
}

/** Status code of a raw HTTP answer. */
export function statusOf (raw: string): number {
  return Number(raw.slice(9, 12))
}

export interface Reply {
  status: number
  headers: import('node:http').IncomingHttpHeaders
  body: string
}

/** One request with node:http (which lets a test send any header), on a fresh connection. */
export function send (url: string, options: { method?: string, headers?: Record<string, string | string[]>, body?: string | Buffer } = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: options.method ?? 'GET', headers: options.headers, agent: false }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(options.body)
  })
}
