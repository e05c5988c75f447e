import { fetch, type Dispatcher } from 'undici'

/**
 * How requests reach the auth server (discovery, grants, the session's
 * end): oauth4webapi's `customFetch`, a fetch that never follows a
 * redirect. Tests replace it with an endpoint of their own.
 */
export type AuthFetch = (url: string, init: { method: string, headers: Record<string, string>, body?: unknown, signal?: AbortSignal | undefined }) => Promise<Response>

/** Where requests to the auth server go: a dispatcher, and the client certificate its new connections present. */
export interface AuthConnections {
  readonly current: Dispatcher
  readonly certificate: string | undefined
}

/** A token (or discovery) answer larger than this is not one: its dispatcher's maxResponseSize. */
export const MAX_ANSWER_BYTES = 256 * 1024

/** The client certificate each answer's request presented. */
const presented = new WeakMap<Response, string>()

/** The thumbprint of the client certificate `res`'s request presented, if any. */
export function presentedCertificate (res: Response): string | undefined {
  return presented.get(res)
}

/**
 * undici's fetch over the auth server's connections (proxy-aware, TLS
 * verified, answers bounded by the dispatcher); a request goes to the URL
 * configured or discovered and nowhere else.
 */
export function authFetch (connections: AuthConnections): AuthFetch {
  return async (url, init) => {
    const { current, certificate } = connections
    // undici's Response is the Fetch standard's, as oauth4webapi takes it
    const res = await fetch(url, { method: init.method, headers: init.headers, body: init.body as string | URLSearchParams | undefined, signal: init.signal ?? null, redirect: 'manual', dispatcher: current }) as unknown as Response
    if (certificate !== undefined) presented.set(res, certificate)
    return res
  }
}
