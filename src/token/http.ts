import type { Dispatcher } from 'undici'

/** One request to the auth server (discovery, a grant, the session's end), as oauth4webapi makes it. */
export interface AuthRequest {
  method: 'GET' | 'POST'
  url: string
  headers: Record<string, string>
  body?: string
  signal: AbortSignal
}

/** The auth server's answer, read whole: header names in lower case. */
export interface AuthAnswer {
  status: number
  headers?: Record<string, string>
  body: string
  /** the thumbprint (x5t#S256) of the client certificate the request was sent with, if any */
  certificate?: string
}

/** Where requests to the auth server go: a dispatcher, and the client certificate its new connections present. */
export interface AuthConnections {
  readonly current: Dispatcher
  readonly certificate: string | undefined
}

/** Sends one request to the auth server; rejects on a network error and on the signal. Tests replace it. */
export type AuthHttp = (request: AuthRequest) => Promise<AuthAnswer>

/** A token (or discovery) answer larger than this is not one. */
export const MAX_ANSWER_BYTES = 256 * 1024

/** AuthHttp over undici; the caller owns the dispatchers (proxy-aware, TLS verified). */
export function createAuthHttp (connections: AuthConnections): AuthHttp {
  return async ({ method, url, headers, body, signal }) => {
    const { current: dispatcher, certificate } = connections
    const { origin, pathname, search } = new URL(url)
    // undici's request() never follows redirects: a request goes to the
    // configured (or discovered) URL and nowhere else.
    const res = await dispatcher.request({ origin, path: pathname + search, method, signal, headers, ...(body !== undefined && { body }) })
    const chunks: Buffer[] = []
    let size = 0
    for await (const chunk of res.body) {
      size += (chunk as Buffer).length
      if (size > MAX_ANSWER_BYTES) {
        res.body.destroy()
        throw new Error('the answer is larger than 256 KiB')
      }
      chunks.push(chunk as Buffer)
    }
    const kept: Record<string, string> = {}
    for (const [name, value] of Object.entries(res.headers)) {
      if (typeof value === 'string') kept[name] = value
    }
    return { status: res.statusCode, headers: kept, body: Buffer.concat(chunks).toString('utf8'), ...(certificate !== undefined && { certificate }) }
  }
}

/** The client certificate each answer's request was sent with, for the responses fetchOver makes. */
const presented = new WeakMap<Response, string>()

/** The thumbprint of the client certificate `res`'s request presented, if any. */
export function presentedCertificate (res: Response): string | undefined {
  return presented.get(res)
}

/** Statuses whose answer has no body (the Fetch standard's null body statuses). */
const NULL_BODY = new Set([101, 103, 204, 205, 304])

/**
 * oauth4webapi's `customFetch` over an AuthHttp. A status a Response cannot
 * hold (below 200, above 599) is a failed request, as a network error is.
 */
export function fetchOver (http: AuthHttp): (url: string, init: { method: string, headers: Record<string, string>, body?: unknown, signal?: AbortSignal }) => Promise<Response> {
  return async (url, init) => {
    const answer = await http({
      method: init.method === 'GET' ? 'GET' : 'POST',
      url,
      headers: init.headers,
      ...(init.body !== undefined && init.body !== null && { body: String(init.body) }),
      signal: init.signal ?? new AbortController().signal
    })
    if (answer.status < 200 || answer.status > 599) throw new Error(`the server answered with status ${answer.status}`)
    const res = new Response(NULL_BODY.has(answer.status) ? null : answer.body, { status: answer.status, headers: answer.headers ?? {} })
    if (answer.certificate !== undefined) presented.set(res, answer.certificate)
    return res
  }
}
