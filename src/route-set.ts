import type { Config, RouteConfig } from './config/load.js'
import type { ForwardProxy } from './forward/proxy.js'
import type { Listener } from './proxy/server.js'
import { Route, type RouteDeps, type RouteSettings } from './route.js'
import type { HeldCredential } from './token/registry.js'

/** What a new configuration changed, by route name, and the settings that wait for a restart. */
export interface Applied {
  added: string[]
  removed: string[]
  changed: string[]
  /** the variables whose new values need new listeners, or a restart otherwise; the rest was applied */
  restart: string[]
}

/**
 * Settings read once, by what opens the listeners and sizes their bounds:
 * a new value waits for a restart. Everything else is a route's or a
 * credential's, and applies to it.
 */
const AT_START = [
  'PROXY_HOST', 'PROXY_PORT', 'PROXY_MAX_CONNECTIONS', 'PROXY_MAX_REQUESTS', 'PROXY_ROUTE_MAX_REQUESTS',
  'ADMIN_HOST', 'ADMIN_PORT', 'ADMIN_MAX_CONNECTIONS', 'SHUTDOWN_GRACE_MS', 'LOG_LEVEL',
  'FORWARD_PROXY_PORT', 'FORWARD_PROXY_CA_CERT_FILE', 'FORWARD_PROXY_CA_KEY_FILE', 'FORWARD_PROXY_ALLOW'
]

/** What the route set reads of a configuration: the routes, the settings they share, and the variables a restart would change. */
export type RouteSetConfig = RouteSettings & Pick<Config, 'routes' | 'variables'>

export interface RouteSetOptions {
  /** PROXY_PORT's listener: the default route and the routes with a path */
  main: Listener
  /** the listeners of the routes with a port of their own, by route name */
  own: Map<string, Listener>
  /** what a route is made with; its `config` is the version in use */
  deps: RouteDeps<RouteSetConfig>
}

/**
 * The routes in use, and the listeners' tables that serve them. A new
 * version of the configuration is applied route by route: a route whose
 * settings (its own, and those every route shares) are unchanged is kept
 * as it is; a changed or new one is made anew, its credential the one
 * held for the same credential settings when there is one (so no new
 * grant); one no longer there leaves the tables, its requests in flight
 * finishing on its connections before they close, its WebSocket sessions
 * ended at once.
 */
export class RouteSet {
  #routes: Route[]
  #config: RouteSetConfig
  /** the configuration the listeners were opened with: what a restart would change is measured from it */
  readonly #started: RouteSetConfig
  /** routes left out that still have requests in progress; their credentials are still held */
  readonly #retiring = new Set<Route>()
  readonly #o: RouteSetOptions
  #forward: ForwardProxy | undefined

  private constructor (routes: Route[], o: RouteSetOptions) {
    this.#routes = routes
    this.#config = o.deps.config
    this.#started = o.deps.config
    this.#o = o
  }

  /** The routes of `o.deps.config`, made; undone should one fail. */
  static async build (o: RouteSetOptions): Promise<RouteSet> {
    const routes: Route[] = []
    try {
      for (const c of o.deps.config.routes) routes.push(await Route.build(c, o.deps))
    } catch (err) {
      await Promise.all(routes.map(async (route) => await route.close()))
      throw err
    }
    const set = new RouteSet(routes, o)
    set.#place()
    return set
  }

  /** Every route, the default route first. */
  get all (): readonly Route[] {
    return this.#routes
  }

  /** The credentials the routes hold, those left out while their requests finish included. */
  get credentials (): ReadonlySet<HeldCredential> {
    return new Set([...this.#routes, ...this.#retiring].map((route) => route.credential))
  }

  /** The forward proxy, which serves every route too. */
  serveForward (proxy: ForwardProxy): void {
    this.#forward = proxy
    proxy.serve(this.#o.deps, this.#routes)
  }

  /**
   * Applies `next`: the routes it adds, removes or changes, and what every
   * route shares; a route with a port of its own that is new, gone or moved
   * waits for a restart, named in `restart` with the other settings read
   * once. Resolves with the routes made, before the old ones have closed;
   * `retired` is told of each old one once its requests are done.
   */
  async apply (next: RouteSetConfig, retired: (route: Route) => void): Promise<{ applied: Applied, made: Route[] }> {
    const restart = AT_START.filter((name) => this.#started.variables[name] !== next.variables[name])
    const current = new Map(this.#routes.map((route) => [route.name, route]))
    const deps = { ...this.#o.deps, config: next }
    const wanted: RouteConfig[] = []
    const { own } = this.#o
    for (const c of next.routes) {
      const old = current.get(c.name)
      // a listener of its own is opened at start only: a route new there, moved or leaving it waits for a restart
      const here = own.has(c.name) ? old?.config.port : undefined
      if (c.port !== here) {
        restart.push(c.variables.port ?? c.variables.path ?? c.variables.baseUrl)
        if (old !== undefined) wanted.push(old.config)
        continue
      }
      wanted.push(c)
    }
    // one with a port of its own that is gone keeps serving there until the restart
    for (const name of own.keys()) {
      if (next.routes.some((c) => c.name === name)) continue
      const old = current.get(name)!
      restart.push(old.config.variables.port!)
      wanted.push(old.config)
    }
    const routes: Route[] = []
    const made: Route[] = []
    const applied: Applied = { added: [], removed: [], changed: [], restart: [...new Set(restart)].sort() }
    try {
      for (const c of wanted) {
        const old = current.get(c.name)
        if (old !== undefined && (old.config === c || routeKey(old.config, this.#config) === routeKey(c, next))) {
          routes.push(old)
          continue
        }
        const route = await Route.build(c, deps, old?.sessions)
        made.push(route)
        routes.push(route)
        applied[old === undefined ? 'added' : 'changed'].push(c.name)
      }
    } catch (err) {
      await Promise.all(made.map(async (route) => await route.close()))
      throw err
    }
    const left = this.#routes.filter((route) => !routes.includes(route))
    applied.removed = left.filter((route) => !routes.some((r) => r.name === route.name)).map((route) => route.name)
    this.#routes = routes
    this.#config = next
    this.#o.deps = deps
    this.#place()
    this.#forward?.serve(deps, routes)
    for (const route of left) {
      this.#retiring.add(route)
      void route.retire(applied.removed.includes(route.name)).finally(() => {
        this.#retiring.delete(route)
        retired(route)
      })
    }
    return { applied, made }
  }

  /** Closes every route's connections at once (the listeners have drained). */
  async close (): Promise<void> {
    await Promise.all(this.#routes.map(async (route) => await route.close()))
  }

  /** The listeners' tables, from the routes in use. */
  #place (): void {
    const { main, own, deps } = this.#o
    main.table.set(this.#routes.filter((route) => !own.has(route.name)).map((route) => route.entry(main, deps)))
    for (const [name, listener] of own) {
      const route = this.#routes.find((r) => r.name === name)
      listener.table.set(route === undefined ? [] : [route.entry(listener, deps)])
    }
  }
}

/**
 * A route's identity: its settings (its credential's among them, with
 * what a named route takes from the default route) and those every route
 * and credential share, so a change to the default route alone remakes
 * only the routes that inherit it.
 */
function routeKey (route: RouteConfig, config: RouteSetConfig): string {
  return JSON.stringify([route, config.token, config.egress, config.upstream, config.proxy.websocketMaxMessageBytes])
}
