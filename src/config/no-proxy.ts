/** A URL's port, the scheme's default when it names none. */
export function portOf (url: URL): number {
  return url.port !== '' ? Number(url.port) : url.protocol === 'https:' ? 443 : 80
}

/** A host as compared here: lower case, without IPv6 brackets or a final dot. */
export function hostOf (host: string): string {
  return host.toLowerCase().replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '')
}

/**
 * Whether NO_PROXY's entries name `url`'s host: `*`, or a name (which
 * covers its subdomains; a leading `.` or `*.` is dropped) or an address
 * (IPv6 in brackets), each with a port or without.
 */
export function bypassesProxy (noProxy: string, url: URL): boolean {
  const name = hostOf(url.hostname)
  const port = String(portOf(url))
  for (const entry of noProxy.split(/[\s,]+/).filter(Boolean)) {
    if (entry === '*') return true
    const at = entry.startsWith('[') ? entry.indexOf(']') + 1 : entry.lastIndexOf(':')
    const host = hostOf(at > 0 && entry[at] === ':' ? entry.slice(0, at) : entry).replace(/^\*?\./, '')
    const entryPort = at > 0 && entry[at] === ':' ? entry.slice(at + 1) : undefined
    if (entryPort !== undefined && entryPort !== port) continue
    if (name === host || name.endsWith(`.${host}`)) return true
  }
  return false
}
