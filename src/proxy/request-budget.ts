/** The share of what no route serves: the forward proxy's tunnels and the requests it passes on untouched. */
export const UNROUTED = '-'

/**
 * The requests in progress over all the proxy's listeners (PROXY_MAX_REQUESTS)
 * and each route's share of them (PROXY_ROUTE_MAX_REQUESTS): a route whose
 * upstream hangs fills its own share, and the other routes keep serving
 * from the rest, as Envoy bounds each cluster's requests apart. What no
 * route serves has a share of its own, so that tunnels cannot fill the
 * sidecar either.
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

  /** Takes a place for a request of `route` (undefined: one no route serves); false when the sidecar or that share is full. */
  take (route: string | undefined): boolean {
    if (this.#inProgress >= this.#max) return false
    const share = route ?? UNROUTED
    const taken = this.#routes.get(share) ?? 0
    if (taken >= this.#routeMax) return false
    this.#routes.set(share, taken + 1)
    this.#inProgress++
    return true
  }

  /** Gives back a place `take` gave. */
  give (route: string | undefined): void {
    const share = route ?? UNROUTED
    this.#inProgress--
    this.#routes.set(share, this.#routes.get(share)! - 1)
  }
}
