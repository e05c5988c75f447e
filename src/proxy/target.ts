import type { RouteSettings } from './context.js'

/** Where a request goes on its route's upstream: the path (the base path's, then the request's under the prefix) and the query as sent. */
export interface UpstreamTarget {
  path: string
  query: string
}

/**
 * The upstream target of a request's raw target on its route: the route's
 * prefix removed, whole segments at a time, then the rest under BASE_URL's
 * path. The router matched the decoded path, so the segments removed are
 * those that decode to the prefix's (`/%61pi/x` under `/api` is `/x`), never
 * a count of characters. Undefined when the raw target does not start with
 * segments that decode to the prefix (an encoded slash within one, say).
 */
export function upstreamTarget (url: string, route: Pick<RouteSettings, 'basePath' | 'prefix'>): UpstreamTarget | undefined {
  const q = url.indexOf('?')
  const path = q === -1 ? url : url.slice(0, q)
  const query = q === -1 ? '' : url.slice(q)
  const rest = withoutPrefix(path, route.prefix)
  return rest === undefined ? undefined : { path: route.basePath + rest, query }
}

function withoutPrefix (path: string, prefix: string): string | undefined {
  if (prefix === '') return path.startsWith('/') ? path : `/${path}`
  // the common case: the prefix as it is, ending at a segment's end
  if (path.startsWith(prefix) && (path.length === prefix.length || path.charCodeAt(prefix.length) === 47 /* / */)) {
    return path.length === prefix.length ? '/' : path.slice(prefix.length)
  }
  // without an escape the segments are as they read, which the common case compared: a route
  // table tries every prefix in turn, and the other routes' need not be split
  if (!path.includes('%')) return undefined
  const wanted = prefix.split('/').slice(1)
  const raw = path.split('/')
  if (raw[0] !== '' || raw.length <= wanted.length) return undefined
  for (let i = 0; i < wanted.length; i++) {
    if (decodeUnreserved(raw[i + 1]!) !== wanted[i]) return undefined
  }
  const rest = raw.slice(wanted.length + 1)
  return rest.length === 0 ? '/' : `/${rest.join('/')}`
}

/** A segment with its percent-escapes decoded, as the router read it; a prefix holds unreserved characters only. */
function decodeUnreserved (segment: string): string {
  return segment.replace(/%([0-9A-Fa-f]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)))
}
