import { createHash, randomBytes, X509Certificate } from 'node:crypto'
import { EventEmitter } from 'node:events'
import { mkdtempSync, readFileSync } from 'node:fs'
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { TLSSocket } from 'node:tls'
import { exportJWK, generateKeyPair } from 'jose'
import type { Test } from 'tap'
import { Agent, fetch as undiciFetch } from 'undici'
import { DpopVerifier } from '../../dev/dpop-proof.js'
import { TestCa, type Issued } from './certificates.js'
import { root, spawnSidecar, start, untilReady, type SpawnedSidecar } from './process.js'

/*
 * panva's oidc-provider (an OpenID-certified authorization server nobody
 * here wrote), started in this process on 127.0.0.1, port 0, configured per
 * test: its clients, features, token lifetimes, TLS. What it received and
 * what it decided is recorded from its own middleware and events, so that
 * a test waits for the server's grant rather than for time.
 */

/** oidc-provider has no TypeScript declarations: the few members used here. */
interface Provider extends EventEmitter {
  callback: () => (req: IncomingMessage, res: ServerResponse) => void
  use: (middleware: (ctx: KoaContext, next: () => Promise<void>) => Promise<void>) => void
}
interface KoaContext {
  method: string
  path: string
  status: number
  body: unknown
  get: (name: string) => string
  socket: TLSSocket
  req: IncomingMessage
  response: { get: (name: string) => string }
  oidc?: { route?: string, body?: Record<string, unknown>, client?: { clientId: string, clientAuthMethod: string } }
}
type ProviderClass = new (issuer: string, configuration: Record<string, unknown>) => Provider

const { default: ProviderCtor } = await import('oidc-provider' as string) as { default: ProviderClass }

/** A client as oidc-provider registers it (OpenID Connect Dynamic Client Registration metadata). */
export type ClientMetadata = Record<string, unknown> & { client_id: string }

export interface ProviderOptions {
  clients: ClientMetadata[]
  /** the issuer's path: '' for a bare origin (the default), '/tenant-a' for one under a path */
  issuerPath?: string
  /** a trailing slash on the issuer, as Auth0's has */
  trailingSlash?: boolean
  /** merged over the harness's features (clientCredentials, introspection, revocation on) */
  features?: Record<string, unknown>
  /** the access token's lifetime, seconds (oidc-provider's ttl.ClientCredentials) */
  accessTokenTtl?: number
  /** serve HTTPS with a certificate from `ca`, asking every client for its certificate (RFC 8705) */
  tls?: { ca: TestCa }
  /**
   * resource indicators (RFC 8707) on: access tokens for `resource` are JWTs
   * (oidc-provider's `jwt` format), with its scopes; `defaultResource` is used
   * when the client names none
   */
  jwtResource?: { resource: string, scope: string, defaultResource?: boolean }
  /** the scopes the server knows (it refuses others with invalid_scope) */
  scopes?: string[]
  /** answer 404 at `/.well-known/openid-configuration`: a plain OAuth server with RFC 8414 metadata only */
  noOpenIdDocument?: boolean
  /** more of oidc-provider's configuration, as it is */
  configuration?: Record<string, unknown>
}

/** One request the provider answered, as its own middleware saw it (no secret: the names of the form's fields, the scheme of Authorization). */
export interface ProviderRequest {
  at: number
  method: string
  /** the path as the server received it (before it is mounted under the issuer's path) */
  path: string
  /** oidc-provider's name for the endpoint: token, discovery, introspection, revocation... */
  route?: string
  status: number
  /** the answer's `error`, for a refusal */
  error?: string
  errorDescription?: string
  /** the names of the form's fields, in order */
  fields: string[]
  grantType?: string
  scope?: string
  /** the form's client_id */
  formClientId?: string
  /** the scheme of the Authorization header (Basic, DPoP...) */
  authorization?: string
  /** the client the server authenticated, and how */
  clientId?: string
  clientAuthMethod?: string
  /** a DPoP proof came, and the nonce it carried */
  dpop: boolean
  dpopNonce?: string
  /** the DPoP-Nonce header of the answer */
  answeredNonce?: string
  /** the x5t#S256 of the client certificate presented (HTTPS) */
  certificate?: string
  tokenType?: string
}

export interface ProviderEvent {
  name: string
  at: number
  clientId?: string
  /** the error's code and description (grant.error, revocation.error...) */
  error?: string
  description?: string
}

export interface RunningProvider {
  issuer: string
  origin: string
  tokenUrl: string
  jwksUrl: string
  introspectionUrl: string
  revocationUrl: string
  requests: ProviderRequest[]
  events: ProviderEvent[]
  /** requests to the token endpoint */
  tokenRequests: () => ProviderRequest[]
  /** the access tokens issued (grant.success), in order */
  grants: () => ProviderEvent[]
  /**
   * Resolves with the first event called `name` (and matching `which`)
   * recorded after the `after`-th one of that name, waiting for it: the
   * server's own record of a grant, never a fixed time.
   */
  event: (name: string, options?: { after?: number, which?: (e: ProviderEvent) => boolean, ms?: number }) => Promise<ProviderEvent>
  /** the CA file to trust for it, when it serves HTTPS */
  caFile?: string
  /** the CA that signed its certificate (and signs clients' ones) */
  ca?: TestCa
  /** the x5t#S256 of a PEM certificate */
  thumbprint: (pem: string) => string
  provider: Provider
}

const TRACKED_EVENTS = [
  'grant.success', 'grant.error', 'client_credentials.saved', 'server_error',
  'revocation.success', 'revocation.error', 'introspection.error', 'discovery.error', 'jwks.error'
]

function thumbprintOf (pem: string): string {
  return createHash('sha256').update(new X509Certificate(pem).raw).digest('base64url')
}

/** The PEM of the certificate a TLS client presented, when the CA verified it. */
function peerCertificate (socket: TLSSocket): string | undefined {
  if (socket.encrypted !== true) return undefined
  const cert = socket.getPeerCertificate()
  if (cert?.raw === undefined) return undefined
  return new X509Certificate(cert.raw).toString()
}

/** A new test CA in a directory of its own (removed with the OS's tmp). */
export function testCa (name: string): TestCa {
  return TestCa.create(mkdtempSync(join(tmpdir(), 'oidc-provider-ca-')), name)
}

/** oidc-provider on 127.0.0.1, port 0, with `options`; closed in teardown. */
export async function startProvider (t: Test, options: ProviderOptions): Promise<RunningProvider> {
  let handler: ((req: IncomingMessage, res: ServerResponse) => void) | undefined
  const requests: ProviderRequest[] = []
  const issuerPath = options.issuerPath ?? ''
  const front = (req: IncomingMessage, res: ServerResponse): void => {
    const url = req.url ?? '/'
    ;(req as IncomingMessage & { receivedUrl: string }).receivedUrl = url
    const notFound = (): void => {
      requests.push({ at: Date.now(), method: req.method ?? '', path: url.split('?')[0]!, status: 404, fields: [], dpop: false })
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not_found"}')
    }
    if (options.noOpenIdDocument === true && url.split('?')[0]!.endsWith('/.well-known/openid-configuration')) return notFound()
    // RFC 8414 §3.1: an issuer's path goes after the well-known segment;
    // oidc-provider serves its metadata under its own mount point
    const rfc8414 = `/.well-known/oauth-authorization-server${issuerPath}`
    const wanted = issuerPath !== '' && (url === rfc8414 || url.startsWith(`${rfc8414}?`)) ? `${issuerPath}/.well-known/oauth-authorization-server` : url
    if (issuerPath !== '' && !wanted.startsWith(`${issuerPath}/`)) return notFound()
    // mounted under the issuer's path, as Express's app.use(path, ...) does it
    ;(req as IncomingMessage & { originalUrl: string }).originalUrl = wanted
    req.url = wanted.slice(issuerPath.length)
    handler!(req, res)
  }
  let server: Server
  let certificate: Issued | undefined
  if (options.tls !== undefined) {
    certificate = options.tls.ca.issue(`provider-${randomBytes(4).toString('hex')}`, { cn: '127.0.0.1', san: 'IP:127.0.0.1' })
    server = createHttpsServer({ key: certificate.key, cert: certificate.cert, ca: [certificateOf(options.tls.ca)], requestCert: true, rejectUnauthorized: false }, front)
  } else {
    server = createHttpServer(front)
  }
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  const origin = `${options.tls !== undefined ? 'https' : 'http'}://127.0.0.1:${port}`
  const issuer = `${origin}${issuerPath}${options.trailingSlash === true ? '/' : ''}`

  const { privateKey } = await generateKeyPair('RS256', { extractable: true })
  const signing = { ...await exportJWK(privateKey), alg: 'RS256', use: 'sig', kid: 'provider-signing' }
  const jwt = options.jwtResource
  const features: Record<string, unknown> = {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    // any authenticated client may introspect (the API's does); a client revokes its own tokens only
    introspection: { enabled: true, allowedPolicy: async () => true },
    revocation: { enabled: true, allowedPolicy: async (_ctx: unknown, client: { clientId: string }, token: { clientId: string }) => token.clientId === client.clientId },
    ...(jwt !== undefined && {
      resourceIndicators: {
        enabled: true,
        defaultResource: async (_ctx: unknown, _client: unknown, oneOf?: string) => oneOf ?? (jwt.defaultResource === true ? jwt.resource : undefined),
        useGrantedResource: async () => true,
        getResourceServerInfo: async (_ctx: unknown, indicator: string) => {
          if (indicator !== jwt.resource) throw new InvalidTarget()
          return { scope: jwt.scope, audience: jwt.resource, accessTokenFormat: 'jwt', accessTokenTTL: options.accessTokenTtl ?? 3600 }
        }
      }
    }),
    ...(options.tls !== undefined && {
      mTLS: {
        enabled: true,
        certificateBoundAccessTokens: true,
        tlsClientAuth: true,
        selfSignedTlsClientAuth: true,
        getCertificate: (ctx: KoaContext) => peerCertificate(ctx.socket),
        certificateAuthorized: (ctx: KoaContext) => ctx.socket.authorized,
        certificateSubjectMatches: (ctx: KoaContext, property: string, expected: string) => {
          const pem = peerCertificate(ctx.socket)
          if (pem === undefined) return false
          const cert = new X509Certificate(pem)
          // Node writes a DN one attribute a line, most significant first
          if (property === 'tls_client_auth_subject_dn') return cert.subject.split('\n').join(',') === expected
          if (property === 'tls_client_auth_san_dns') return (cert.subjectAltName ?? '').split(', ').includes(`DNS:${expected}`)
          return false
        }
      }
    }),
    ...options.features
  }
  const InvalidTarget = (await import('oidc-provider' as string) as { errors: { InvalidTarget: new () => Error } }).errors.InvalidTarget
  const provider = new ProviderCtor(issuer, {
    clients: options.clients,
    jwks: { keys: [signing] },
    features,
    scopes: options.scopes ?? ['openid', 'offline_access', 'orders:read', 'orders:write'],
    // the methods it offers (and publishes in token_endpoint_auth_methods_supported)
    clientAuthMethods: ['client_secret_basic', 'client_secret_post', 'client_secret_jwt', 'private_key_jwt', 'none',
      ...(options.tls !== undefined ? ['tls_client_auth', 'self_signed_tls_client_auth'] : [])],
    ttl: { ClientCredentials: options.accessTokenTtl ?? 600, AccessToken: options.accessTokenTtl ?? 600 },
    ...options.configuration
  })

  provider.use(async (ctx, next) => {
    const at = Date.now()
    await next()
    const form = ctx.oidc?.body ?? {}
    const body = (typeof ctx.body === 'object' && ctx.body !== null ? ctx.body : {}) as Record<string, unknown>
    const proof = ctx.get('dpop')
    let dpopNonce: string | undefined
    if (proof !== '') {
      try {
        dpopNonce = (JSON.parse(Buffer.from(proof.split('.')[1] ?? '', 'base64url').toString()) as { nonce?: string }).nonce
      } catch {}
    }
    const pem = peerCertificate(ctx.socket)
    const record: ProviderRequest = {
      at,
      method: ctx.method,
      path: ((ctx.req as IncomingMessage & { receivedUrl?: string }).receivedUrl ?? ctx.path).split('?')[0]!,
      status: ctx.status,
      fields: Object.keys(form),
      dpop: proof !== '',
      ...(ctx.oidc?.route !== undefined && { route: ctx.oidc.route }),
      ...(typeof body.error === 'string' && { error: body.error }),
      ...(typeof body.error_description === 'string' && { errorDescription: body.error_description }),
      ...(typeof body.token_type === 'string' && { tokenType: body.token_type }),
      ...(typeof form.grant_type === 'string' && { grantType: form.grant_type }),
      ...(typeof form.scope === 'string' && { scope: form.scope }),
      ...(typeof form.client_id === 'string' && { formClientId: form.client_id }),
      ...(ctx.get('authorization') !== '' && { authorization: ctx.get('authorization').split(' ')[0] }),
      ...(ctx.oidc?.client !== undefined && { clientId: ctx.oidc.client.clientId, clientAuthMethod: ctx.oidc.client.clientAuthMethod }),
      ...(dpopNonce !== undefined && { dpopNonce }),
      ...(ctx.response.get('dpop-nonce') !== '' && { answeredNonce: ctx.response.get('dpop-nonce') }),
      ...(pem !== undefined && { certificate: thumbprintOf(pem) })
    }
    requests.push(record)
  })

  const events: ProviderEvent[] = []
  const happened = new EventEmitter()
  for (const name of TRACKED_EVENTS) {
    provider.on(name, (subject: KoaContext & { clientId?: string }, err?: Error & { error?: string, error_description?: string }) => {
      const clientId = subject?.oidc?.client?.clientId ?? subject?.clientId
      const event: ProviderEvent = {
        name,
        at: Date.now(),
        ...(clientId !== undefined && { clientId }),
        ...(err?.error !== undefined && { error: err.error }),
        ...(err?.error_description !== undefined && { description: err.error_description })
      }
      events.push(event)
      happened.emit('event', event)
    })
  }
  handler = provider.callback()

  t.teardown(async () => {
    server.closeAllConnections?.()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  })

  const base = `${origin}${issuerPath}`
  return {
    issuer,
    origin,
    tokenUrl: `${base}/token`,
    jwksUrl: `${base}/jwks`,
    introspectionUrl: `${base}/token/introspection`,
    revocationUrl: `${base}/token/revocation`,
    requests,
    events,
    tokenRequests: () => requests.filter((r) => r.route === 'token'),
    grants: () => events.filter((e) => e.name === 'grant.success'),
    event: async (name, o = {}) => {
      const matches = (e: ProviderEvent): boolean => e.name === name && (o.which?.(e) ?? true)
      const seen = events.filter(matches)
      if (seen.length > (o.after ?? 0)) return seen[o.after ?? 0]!
      const found = await new Promise<ProviderEvent>((resolve, reject) => {
        let count = seen.length
        const timer = setTimeout(() => {
          happened.off('event', listener)
          reject(new Error(`no ${name} event from oidc-provider in ${o.ms ?? 20_000} ms; it recorded ${JSON.stringify(events.slice(-5))}`))
        }, o.ms ?? 20_000)
        const listener = (e: ProviderEvent): void => {
          if (!matches(e)) return
          if (count++ < (o.after ?? 0)) return
          clearTimeout(timer)
          happened.off('event', listener)
          resolve(e)
        }
        happened.on('event', listener)
      })
      // the event comes from inside the endpoint: its request is recorded once the answer is made
      await new Promise((resolve) => setImmediate(resolve))
      return found
    },
    ...(options.tls !== undefined && { caFile: options.tls.ca.caFile, ca: options.tls.ca }),
    thumbprint: thumbprintOf,
    provider
  }
}

function certificateOf (ca: TestCa): string {
  return readFileSync(ca.caFile, 'utf8')
}

/** One request the API below answered. */
export interface ApiCall {
  at: number
  method: string
  url: string
  /** the Authorization header's scheme */
  scheme?: string
  status: number
  /** why the token was refused */
  reason?: string
  /** what the authorization server said of the token (RFC 7662), or the JWT's claims */
  token?: Record<string, unknown>
  /** the x5t#S256 of the client certificate the request came with (HTTPS) */
  certificate?: string
}

/**
 * An API that takes only tokens the provider vouches for, as a resource
 * server does: each one introspected (RFC 7662, as client `client`) or, with
 * `jwtAudience`, verified as a JWT against the provider's keys (its
 * issuer, its audience); a certificate-bound token only over TLS with that
 * certificate (RFC 8705 §3), a DPoP-bound one only with a valid proof of its
 * key (RFC 9449 §7). 200 with the token's client id, else 401. Closed in teardown.
 */
export async function tokenCheckingApi (t: Test, op: RunningProvider, options: { client?: { id: string, secret: string }, tls?: { ca: TestCa }, jwtAudience?: string } = {}): Promise<{ url: string, calls: ApiCall[] }> {
  const calls: ApiCall[] = []
  const dispatcher = new Agent(op.caFile !== undefined ? { connect: { ca: readFileSync(op.caFile, 'utf8') } } : {})
  const proofs = new DpopVerifier()
  let origin = ''
  const { createLocalJWKSet, jwtVerify } = await import('jose')

  const judge = async (req: IncomingMessage, call: ApiCall): Promise<string | undefined> => {
    const [scheme, value] = (req.headers.authorization ?? '').split(' ')
    if (scheme === undefined || scheme === '' || value === undefined) return 'no token'
    call.scheme = scheme
    let claims: Record<string, unknown>
    if (options.jwtAudience !== undefined) {
      const keys = await (await undiciFetch(op.jwksUrl, { dispatcher })).json() as { keys: [] }
      try {
        claims = (await jwtVerify(value, createLocalJWKSet(keys), { issuer: op.issuer, audience: options.jwtAudience, typ: 'at+jwt' })).payload as Record<string, unknown>
      } catch (err) {
        return `the JWT does not verify: ${(err as Error).message}`
      }
    } else {
      const client = options.client ?? { id: 'orders-api', secret: API_SECRET }
      const answer = await undiciFetch(op.introspectionUrl, {
        method: 'POST',
        dispatcher,
        headers: { authorization: `Basic ${Buffer.from(`${client.id}:${client.secret}`).toString('base64')}`, 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ token: value }).toString()
      })
      claims = await answer.json() as Record<string, unknown>
      if (claims.active !== true) return `introspection: ${answer.status} ${JSON.stringify(claims)}`
    }
    call.token = claims
    const cnf = (claims.cnf ?? {}) as { 'x5t#S256'?: string, jkt?: string }
    if (cnf['x5t#S256'] !== undefined && cnf['x5t#S256'] !== call.certificate) return 'the token is bound to another certificate than the one presented'
    if (cnf.jkt !== undefined || scheme === 'DPoP') {
      if (scheme !== 'DPoP') return 'a DPoP-bound token sent as a bearer token'
      if (cnf.jkt === undefined) return 'a bearer token sent as DPoP'
      const verdict = await proofs.verify(req.headers.dpop, { method: req.method ?? '', url: origin + (req.url ?? ''), accessToken: value, boundTo: cnf.jkt })
      if (!verdict.ok) return `DPoP: ${verdict.description}`
    } else if (scheme !== 'Bearer') {
      return `scheme ${scheme}`
    }
    return undefined
  }
  const handle = (req: IncomingMessage, res: ServerResponse): void => {
    req.resume()
    const socket = req.socket as TLSSocket
    const pem = socket.authorized ? peerCertificate(socket) : undefined
    const call: ApiCall = { at: Date.now(), method: req.method ?? '', url: req.url ?? '', status: 0, ...(pem !== undefined && { certificate: thumbprintOf(pem) }) }
    calls.push(call)
    judge(req, call).then((reason) => {
      call.status = reason === undefined ? 200 : 401
      if (reason !== undefined) call.reason = reason
      res.writeHead(call.status, { 'content-type': 'application/json', ...(reason !== undefined && { 'www-authenticate': 'Bearer error="invalid_token"' }) })
      res.end(JSON.stringify(reason === undefined ? { client_id: call.token?.client_id, scope: call.token?.scope } : { error: 'invalid_token' }))
    }, (err: Error) => {
      call.status = 500
      call.reason = err.message
      res.writeHead(500).end()
    })
  }
  let server: Server
  if (options.tls !== undefined) {
    const cert = options.tls.ca.issue(`api-${randomBytes(4).toString('hex')}`, { cn: '127.0.0.1', san: 'IP:127.0.0.1' })
    server = createHttpsServer({ key: cert.key, cert: cert.cert, ca: [certificateOf(options.tls.ca)], requestCert: true, rejectUnauthorized: false }, handle)
  } else {
    server = createHttpServer(handle)
  }
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  origin = `${options.tls !== undefined ? 'https' : 'http'}://127.0.0.1:${(server.address() as AddressInfo).port}`
  t.teardown(async () => {
    server.closeAllConnections?.()
    await new Promise<void>((resolve) => server.close(() => resolve()))
    await dispatcher.close()
  })
  return { url: origin, calls }
}

/** The secret of the API's own client, which introspects tokens. */
export const API_SECRET = 'orders-api-introspection-secret-6c1d'

/** The API's client at the provider: it only introspects. */
export const API_CLIENT: ClientMetadata = {
  client_id: 'orders-api',
  client_secret: API_SECRET,
  grant_types: [],
  response_types: [],
  redirect_uris: [],
  token_endpoint_auth_method: 'client_secret_basic'
}

/** A client_credentials client of the provider's: a service, no user, no redirect. */
export function serviceClient (client: ClientMetadata): ClientMetadata {
  return { grant_types: ['client_credentials'], response_types: [], redirect_uris: [], ...client }
}

/** The sidecar's settings for client_credentials against `op` (its token URL, unless `discovery`), in front of `apiUrl`. */
export function sidecarEnv (op: RunningProvider, apiUrl: string, env: Record<string, string>): Record<string, string> {
  return {
    BASE_URL: apiUrl,
    AUTH_URL: '',
    AUTH_USERNAME: '',
    AUTH_PASSWORD: '',
    AUTH_GRANT_TYPE: 'client_credentials',
    AUTH_TOKEN_URL: op.tokenUrl,
    TOKEN_RETRY_MIN_MS: '50',
    TOKEN_RETRY_MAX_MS: '200',
    ...(op.caFile !== undefined && { AUTH_TLS_CA_FILE: op.caFile }),
    ...env
  }
}

/** The built sidecar (dist/main.js) for client_credentials against `op`, in front of `apiUrl`; with `ready`, holding a token. */
export async function startSidecar (t: Test, op: RunningProvider, apiUrl: string, env: Record<string, string>, ready = true): Promise<SpawnedSidecar> {
  const all = sidecarEnv(op, apiUrl, env)
  const sidecar = await spawnSidecar(t, all.BASE_URL!, '', '', all)
  if (ready) await untilReady(sidecar)
  return sidecar
}

/** `node dist/main.js check [args]` with exactly `env`: its exit code and its lines. */
export async function runCheck (env: Record<string, string>, args: string[] = []): Promise<{ code: number | null, lines: string[], output: string }> {
  const run = start(env, root, ['check', ...args])
  const closed = new Promise((resolve) => run.child.stdout!.on('close', resolve))
  const code = await run.exited
  await closed
  const output = run.stdout.join('\n') + run.stderr.join('')
  return { code, lines: run.stdout.filter((l) => l !== ''), output }
}
