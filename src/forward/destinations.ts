import { lookup } from 'node:dns/promises'
import { BlockList, isIP } from 'node:net'
import { networkInterfaces } from 'node:os'
import { normalizeIp } from '../config/forward.js'
import type { AllowPattern } from '../config/types.js'
import { ForbiddenAddressError } from '../errors.js'

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

/**
 * Addresses a destination allowed by name never reaches: loopback,
 * link-local (cloud metadata at 169.254.169.254, ECS's and EKS's credential
 * agents), unspecified, and the cloud metadata services elsewhere (Alibaba's
 * 100.100.100.200; AWS's IMDS and EKS Pod Identity over IPv6). IPv6
 * addresses that stand for an IPv4 one are checked as that IPv4 address.
 */
const NEVER_BY_NAME = new BlockList()
NEVER_BY_NAME.addSubnet('127.0.0.0', 8, 'ipv4')
NEVER_BY_NAME.addSubnet('169.254.0.0', 16, 'ipv4')
NEVER_BY_NAME.addSubnet('0.0.0.0', 8, 'ipv4')
NEVER_BY_NAME.addAddress('100.100.100.200', 'ipv4')
NEVER_BY_NAME.addAddress('::1', 'ipv6')
NEVER_BY_NAME.addAddress('::', 'ipv6')
NEVER_BY_NAME.addSubnet('fe80::', 10, 'ipv6')
NEVER_BY_NAME.addAddress('fd00:ec2::254', 'ipv6')
NEVER_BY_NAME.addAddress('fd00:ec2::23', 'ipv6')

/** Resolves a name to all its addresses, in the resolver's order (dns.lookup's, unless replaced in tests). */
export type Lookup = (hostname: string) => Promise<ReadonlyArray<{ address: string }>>

const systemLookup: Lookup = async (hostname) => await lookup(hostname, { all: true, verbatim: true })

/**
 * The address to connect to for a destination that `pattern` allows. An IP
 * pattern names its address: it is reached, whatever it is. A name is
 * resolved, and refused when any of its addresses is loopback, link-local,
 * unspecified, a cloud metadata service's or one of this host's with a port
 * the sidecar listens on; the address checked is the one connected to, so
 * that a second answer of the name's server cannot differ.
 */
export async function checkedAddress (destination: Pick<Destination, 'hostname' | 'port'>, pattern: AllowPattern, ownPorts: () => readonly number[], resolve: Lookup = systemLookup): Promise<string> {
  if (pattern.kind === 'ip') return destination.hostname
  const answers = await resolve(destination.hostname)
  if (answers.length === 0) throw Object.assign(new Error('the name has no address'), { code: 'ENOTFOUND' })
  const own = ownPorts().includes(destination.port) ? localAddresses() : undefined
  for (const { address } of answers) {
    const canonical = canonicalAddress(address)
    if (canonical === undefined || NEVER_BY_NAME.check(canonical.address, canonical.family) || own?.has(canonical.address) === true) throw new ForbiddenAddressError()
  }
  return answers[0]!.address
}

/**
 * An address as the host it reaches: an IPv6 address that stands for an
 * IPv4 one (IPv4-mapped `::ffff:a.b.c.d`, IPv4-translated `::ffff:0:a.b.c.d`,
 * IPv4-compatible `::a.b.c.d`, the NAT64 prefix `64:ff9b::/96`) as that IPv4
 * address, dotted; any other IPv6 address in full (eight groups of four hex
 * digits), its zone left out. Undefined for what is no IP address.
 */
export function canonicalAddress (address: string): { address: string, family: 'ipv4' | 'ipv6' } | undefined {
  const bare = address.replace(/%[^%]*$/, '')
  const family = isIP(bare)
  if (family === 4) return { address: bare, family: 'ipv4' }
  if (family !== 6) return undefined
  const groups = ipv6Groups(bare)
  const zero = (from: number, to: number): boolean => groups.slice(from, to).every((g) => g === 0)
  const v4 = (): string => [groups[6]! >> 8, groups[6]! & 255, groups[7]! >> 8, groups[7]! & 255].join('.')
  const mapped = zero(0, 5) && groups[5] === 0xffff
  const translated = zero(0, 4) && groups[4] === 0xffff && groups[5] === 0
  // ::a.b.c.d, but not :: or ::1, which are IPv6's own
  const compatible = zero(0, 6) && (groups[6] !== 0 || groups[7]! > 1)
  const nat64 = groups[0] === 0x64 && groups[1] === 0xff9b && zero(2, 6)
  if (mapped || translated || compatible || nat64) return { address: v4(), family: 'ipv4' }
  return { address: groups.map((g) => g.toString(16).padStart(4, '0')).join(':'), family: 'ipv6' }
}

/** The eight 16-bit groups of a valid IPv6 address (isIP's), a dotted IPv4 tail read as the last two. */
function ipv6Groups (address: string): number[] {
  let text = address.toLowerCase()
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text)
  if (dotted !== null) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number]
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`
  }
  const [head = '', tail] = text.split('::')
  const parse = (part: string): number[] => part === '' ? [] : part.split(':').map((g) => parseInt(g, 16))
  const front = parse(head)
  const back = tail === undefined ? [] : parse(tail)
  return [...front, ...new Array<number>(8 - front.length - back.length).fill(0), ...back]
}

/** This host's addresses, canonical (canonicalAddress). */
function localAddresses (): Set<string> {
  const addresses = new Set<string>()
  for (const list of Object.values(networkInterfaces())) {
    for (const { address } of list ?? []) {
      const canonical = canonicalAddress(address)
      if (canonical !== undefined) addresses.add(canonical.address)
    }
  }
  return addresses
}
