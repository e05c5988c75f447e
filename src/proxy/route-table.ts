import type { FastifyRequest } from 'fastify'
import type { ProxyContext } from './context.js'
import { upstreamTarget, type UpstreamTarget } from './target.js'

/** One route as a listener serves it: its parts, its requests in progress, its WebSocket sessions. */
export interface TableEntry {
  context: ProxyContext
  requests: InProgress
  sessions: RouteSessions
}

/** A WebSocket session (or a handshake under way), and what ends it with 1001, saying why. */
export interface OpenSession {
  close: (reason: string) => void
}

/** A route's open WebSocket sessions; once they are ended, a session opening later is ended as it opens. */
export class RouteSessions {
  readonly #open = new Set<OpenSession>()
  #ended: string | undefined

  add (session: OpenSession): void {
    if (this.#ended !== undefined) return session.close(this.#ended)
    this.#open.add(session)
  }

  delete (session: OpenSession): void {
    this.#open.delete(session)
  }

  /** Ends every session, and those that open from now on, with 1001 and `reason`. */
  end (reason: string): void {
    this.#ended = reason
    for (const session of this.#open) session.close(reason)
  }
}

/** The requests a route took that are not answered yet (on every listener), so that a route replaced closes after them. */
export class InProgress {
  #count = 0
  #idle: Array<() => void> = []

  enter (): void {
    this.#count++
  }

  leave (): void {
    if (--this.#count === 0) for (const resolve of this.#idle.splice(0)) resolve()
  }

  /** Resolves once none is in progress. */
  async idle (): Promise<void> {
    if (this.#count > 0) await new Promise<void>((resolve) => this.#idle.push(resolve))
  }
}

declare module 'fastify' {
  interface FastifyRequest {
    /** the route the request was routed to (its listener's table, on arrival); undefined: none took it */
    sidecarRoute: TableEntry | undefined
    /** where it goes on that route's upstream */
    sidecarTarget: UpstreamTarget | undefined
    /** counted among its route's requests in progress (admission's leave ends it) */
    sidecarInProgress: boolean
  }
}

/**
 * A listener's routes, looked up per request: the longest prefix whose
 * whole segments begin the request's path (its base path on the forward
 * proxy's listener, among the routes of the origin asked for). The table
 * is replaced whole when the configuration changes, so a request is
 * routed by one version; Fastify's own routes cannot change once it
 * listens.
 */
export class RouteTable {
  #entries: readonly TableEntry[] = []

  /** The routes from now on (a request already routed keeps its route). */
  set (entries: readonly TableEntry[]): void {
    this.#entries = [...entries].sort((a, b) => b.context.route.prefix.length - a.context.route.prefix.length)
  }

  get entries (): readonly TableEntry[] {
    return this.#entries
  }

  /** Routes `request`: for `origin` only when given (the forward proxy's), else by its path alone. */
  route (request: FastifyRequest, origin?: string): void {
    const url = request.raw.url ?? '/'
    for (const entry of this.#entries) {
      if (origin !== undefined && entry.context.route.origin !== origin) continue
      const target = upstreamTarget(url, entry.context.route)
      if (target === undefined) continue
      request.sidecarRoute = entry
      request.sidecarTarget = target
      request.sidecarInProgress = true
      entry.requests.enter()
      return
    }
  }
}
