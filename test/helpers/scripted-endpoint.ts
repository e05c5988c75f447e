import type { AuthFetch } from '../../src/token/http.js'

/** An answer of the auth server, as a test writes it. */
export interface AuthAnswer {
  status: number
  headers?: Record<string, string>
  body: string
}

export interface Call {
  url: string
  form: Record<string, string>
  headers: Record<string, string>
  signal: AbortSignal
}

/** An answer; `hang` waits for the abort; `later` arrives when its promise resolves, abort or not. */
type Answer = AuthAnswer | Error | 'hang' | { later: Promise<AuthAnswer> }

let counter = 0

/** Statuses a Response holds no body for. */
const NULL_BODY = new Set([101, 103, 204, 205, 304])

/** A successful token answer with fresh, unique tokens. */
export function tokenAnswer (expiresIn = 300, refreshExpiresIn: number | undefined = 1800, withRefresh = true): AuthAnswer {
  counter += 1
  const body: Record<string, unknown> = {
    access_token: `eyJhbGciOiJIUzI1NiJ9.eyJuIjo${counter}fQ.sig${counter}`,
    expires_in: expiresIn,
    token_type: 'Bearer',
    'not-before-policy': 0,
    scope: 'profile email'
  }
  if (withRefresh) {
    body.refresh_token = `refresh-${counter}`
    if (refreshExpiresIn !== undefined) body.refresh_expires_in = refreshExpiresIn
  }
  return { status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }
}

export function keycloakError (status: number, error: string, description: string): AuthAnswer {
  return { status, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ error, error_description: description }) }
}

/**
 * An in-memory token endpoint: answers from a queue (or a default), records
 * every form it received, and can hold a request open until aborted.
 */
export class ScriptedEndpoint {
  readonly calls: Call[] = []
  readonly queue: Answer[] = []
  /** what each call was answered, in order */
  readonly answers: Answer[] = []
  fallback: () => Answer = () => tokenAnswer()
  inflight = 0
  maxInflight = 0

  /** The endpoint as oauth4webapi's customFetch. */
  readonly fetch: AuthFetch = async (url, init) => {
    const signal = init.signal ?? new AbortController().signal
    const body = init.body === undefined || init.body === null ? '' : String(init.body)
    const parsed = Object.fromEntries(new URLSearchParams(body))
    this.calls.push({ url, form: parsed, headers: init.headers, signal })
    const answer = this.queue.length > 0 ? this.queue.shift()! : this.fallback()
    this.answers.push(answer)
    this.inflight += 1
    this.maxInflight = Math.max(this.maxInflight, this.inflight)
    const done = <T>(v: T): T => { this.inflight -= 1; return v }
    const respond = (a: AuthAnswer): Response => new Response(NULL_BODY.has(a.status) ? null : a.body, { status: a.status, headers: a.headers ?? {} })
    if (answer === 'hang') {
      return await new Promise((_resolve, reject) => {
        signal.addEventListener('abort', () => { done(0); reject(new Error('aborted')) }, { once: true })
      })
    }
    if ('later' in answer) return respond(await answer.later.then(done))
    await Promise.resolve()
    done(0)
    if (answer instanceof Error) throw answer
    return respond(answer)
  }

  grants (): string[] {
    return this.calls.map((c) => c.form.grant_type ?? '')
  }

  /** The last answer's access token, as the header the sidecar would send. */
  static header (answer: AuthAnswer): string {
    return `Bearer ${(JSON.parse(answer.body) as { access_token: string }).access_token}`
  }
}
