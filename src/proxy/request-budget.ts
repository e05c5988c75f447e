/**
 * The requests in progress over all the proxy's listeners (PROXY_MAX_REQUESTS)
 * and each route's share of them (PROXY_ROUTE_MAX_REQUESTS): a route whose
 * upstream hangs fills its own share, and the other routes keep serving
 * from the rest, as Envoy bounds each cluster's requests apart.
 */
export class RequestBudget {
  readonly #max: number
  readonly #routeMax: number
  #inProgress = 0
  readonly #routes = new Map<string, number>()

  constructor (max: number, routeMax: number) {
    this.#max = max
    this.#routeMax = routeMax
  }

  /** Takes a place for a request of `route` (undefined: one no route serves); false when the sidecar or the route is full. */
  take (route: string | undefined): boolean {
    if (this.#inProgress >= this.#max) return false
    if (route !== undefined) {
      const taken = this.#routes.get(route) ?? 0
      if (taken >= this.#routeMax) return false
      this.#routes.set(route, taken + 1)
    }
    this.#inProgress++
    return true
  }

  /** Gives back a place `take` gave. */
  give (route: string | undefined): void {
    this.#inProgress--
    if (route !== undefined) this.#routes.set(route, this.#routes.get(route)! - 1)
  }
}
