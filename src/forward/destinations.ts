import { lookup } from 'node:dns/promises'
import { BlockList, isIP } from 'node:net'
import { networkInterfaces } from 'node:os'
import { normalizeIp } from '../config/forward.js'
import type { AllowPattern } from '../config/types.js'

/** Where an application asks the forward proxy to go. */
export interface Destination {
  /** `scheme://host[:port]` as the URL parser writes it (lower case, default port left out), as a route's origin is written */
  origin: string
  /** the host in lower case, an IPv6 address without brackets */
  hostname: string
  port: number
  /** `host:port`, for the access line */
  authority: string
}

/** The destination `scheme://authority`, or undefined when the authority is no host with an optional port. */
export function destinationOf (scheme: 'http' | 'https', authority: string): Destination | undefined {
  // no user information, no path: a host and a port
  if (!/^(\[[0-9A-Fa-f:.]+\]|[^\s\\/?#@[\]:]+)(:\d{1,5})?$/.test(authority)) return undefined
  let url: URL
  try {
    url = new URL(`${scheme}://${authority}`)
  } catch {
    return undefined
  }
  const port = url.port === '' ? (scheme === 'https' ? 443 : 80) : Number(url.port)
  if (port === 0) return undefined
  const hostname = url.hostname.startsWith('[') ? normalizeIp(url.hostname.slice(1, -1)) : url.hostname
  return { origin: url.origin, hostname, port, authority: `${url.hostname}:${port}` }
}

/** A CONNECT's target, `host:port` (the port required); undefined when it is not one. */
export function connectTarget (target: string): Destination | undefined {
  if (!/:\d{1,5}$/.test(target)) return undefined
  return destinationOf('https', target)
}

/** An absolute-form request target split into its destination and the target to send it (the path and query, as written). */
export function absoluteTarget (url: string): { scheme: 'http' | 'https', destination: Destination, target: string } | undefined {
  const parts = /^(https?):\/\/([^/?#]*)([/?][^#]*)?$/i.exec(url)
  if (parts === null) return undefined
  const scheme = parts[1]!.toLowerCase() as 'http' | 'https'
  const destination = destinationOf(scheme, parts[2]!)
  if (destination === undefined) return undefined
  const rest = parts[3] ?? '/'
  return { scheme, destination, target: rest.startsWith('?') ? `/${rest}` : rest }
}

/** The FORWARD_PROXY_ALLOW pattern that lets `destination` through, if one does. */
export function allowing (patterns: readonly AllowPattern[], destination: Pick<Destination, 'hostname' | 'port'>): AllowPattern | undefined {
  const { hostname, port } = destination
  const ip = isIP(hostname) !== 0
  return patterns.find((pattern) => {
    if (pattern.port !== undefined && pattern.port !== port) return false
    if (pattern.kind === 'ip') return ip && pattern.host === hostname
    if (ip) return false
    return pattern.kind === 'host' ? pattern.host === hostname : hostname.endsWith(`.${pattern.host}`)
  })
}

/** Addresses a destination allowed by name never reaches: loopback, link-local (cloud metadata), unspecified. */
const NEVER_BY_NAME = new BlockList()
NEVER_BY_NAME.addSubnet('127.0.0.0', 8, 'ipv4')
NEVER_BY_NAME.addSubnet('169.254.0.0', 16, 'ipv4')
NEVER_BY_NAME.addSubnet('0.0.0.0', 8, 'ipv4')
NEVER_BY_NAME.addAddress('::1', 'ipv6')
NEVER_BY_NAME.addAddress('::', 'ipv6')
NEVER_BY_NAME.addSubnet('fe80::', 10, 'ipv6')

/** The destination resolves to an address it may not reach by its name. */
export class ForbiddenAddressError extends Error {
  readonly code = 'EFORBIDDEN'
  constructor () {
    super('the destination\'s name resolves to an address reached only through an IP pattern')
    this.name = 'ForbiddenAddressError'
  }
}

/**
 * The address to connect to for a destination that `pattern` allows. An IP
 * pattern names its address: it is reached, whatever it is. A name is
 * resolved, and refused when any of its addresses is loopback, link-local,
 * unspecified or one of this host's with a port the sidecar listens on;
 * the address checked is the one connected to, so that a second answer of
 * the name's server cannot differ.
 */
export async function checkedAddress (destination: Pick<Destination, 'hostname' | 'port'>, pattern: AllowPattern, ownPorts: () => readonly number[]): Promise<string> {
  if (pattern.kind === 'ip') return destination.hostname
  const answers = await lookup(destination.hostname, { all: true, verbatim: true })
  if (answers.length === 0) throw Object.assign(new Error('the name has no address'), { code: 'ENOTFOUND' })
  const own = ownPorts().includes(destination.port) ? localAddresses() : undefined
  for (const { address } of answers) {
    if (neverByName(address) || own?.has(normalizeIp(address)) === true) throw new ForbiddenAddressError()
  }
  return answers[0]!.address
}

function neverByName (address: string): boolean {
  const mapped = /^::ffff:(.+)$/i.exec(normalizeIp(address))?.[1]
  if (mapped !== undefined) return NEVER_BY_NAME.check(mappedV4(mapped), 'ipv4')
  return NEVER_BY_NAME.check(address, isIP(address) === 6 ? 'ipv6' : 'ipv4')
}

/** The IPv4 address of an IPv4-mapped IPv6 address's last 32 bits, dotted or in hex (`7f00:1`). */
function mappedV4 (rest: string): string {
  if (rest.includes('.')) return rest
  const [high = '0', low = '0'] = rest.split(':')
  const n = (parseInt(high, 16) << 16 | parseInt(low, 16)) >>> 0
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.')
}

function localAddresses (): Set<string> {
  const addresses = new Set<string>()
  for (const list of Object.values(networkInterfaces())) for (const { address } of list ?? []) addresses.add(normalizeIp(address))
  return addresses
}
