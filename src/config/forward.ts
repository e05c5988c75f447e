import { createPrivateKey, X509Certificate } from 'node:crypto'
import { isIP } from 'node:net'
import { resolve } from 'node:path'
import { readSecretFileSync } from './secret-file.js'
import type { AllowPattern, ForwardSettings, RouteConfig } from './types.js'

/** The CA files' variables, for messages. */
export const FORWARD_CA_NAMES = { cert: 'FORWARD_PROXY_CA_CERT_FILE', key: 'FORWARD_PROXY_CA_KEY_FILE' }

export interface ForwardInput {
  port: number | undefined
  caCert: string | undefined
  caKey: string | undefined
  allow: string | undefined
  routes: RouteConfig[]
  /** the other ports the sidecar listens on, by variable */
  ports: Array<[string, number]>
  cwd: string
}

/**
 * FORWARD_PROXY_*: off without a port. With one, its port is its own, the
 * CA is there when a route is https (a certificate that is a CA, with its
 * key), and every FORWARD_PROXY_ALLOW pattern is one the proxy can match.
 */
export function parseForward (o: ForwardInput, problems: string[], warnings: string[]): ForwardSettings | undefined {
  if (o.port === undefined) {
    for (const [name, value] of [['FORWARD_PROXY_CA_CERT_FILE', o.caCert], ['FORWARD_PROXY_CA_KEY_FILE', o.caKey], ['FORWARD_PROXY_ALLOW', o.allow]] as const) {
      if (value !== undefined) warnings.push(`${name} is not used: FORWARD_PROXY_PORT is not set, the forward proxy is off`)
    }
    return undefined
  }
  if (o.port !== 0) {
    const taken = o.ports.find(([, port]) => port === o.port)
    if (taken !== undefined) problems.push(`FORWARD_PROXY_PORT is ${taken[0]}'s port too; the forward proxy's port is its own`)
  }
  // a destination is a route's BASE_URL: two routes on one would leave the credential to chance
  const seen = new Map<string, RouteConfig>()
  for (const route of o.routes) {
    const where = route.origin + route.basePath
    const before = seen.get(where)
    if (before !== undefined) problems.push(`${route.variables.baseUrl} and ${before.variables.baseUrl} are both ${where}: with FORWARD_PROXY_PORT a request for it could get either credential; give each route its own base URL`)
    else seen.set(where, route)
  }
  const https = o.routes.filter((route) => route.origin.startsWith('https:'))
  let ca: ForwardSettings['ca']
  if (o.caCert === undefined && o.caKey === undefined) {
    if (https.length > 0) problems.push(`FORWARD_PROXY_CA_CERT_FILE and FORWARD_PROXY_CA_KEY_FILE are required with FORWARD_PROXY_PORT: ${https.length === 1 && https[0]!.name === 'default' ? 'BASE_URL is' : `the routes ${https.map((r) => r.name).join(', ')} are`} https, and the application must be shown a certificate it trusts for ${https.length === 1 ? 'its host' : 'their hosts'}`)
  } else if (o.caCert === undefined || o.caKey === undefined) {
    problems.push(o.caCert === undefined ? 'FORWARD_PROXY_CA_KEY_FILE is set without FORWARD_PROXY_CA_CERT_FILE: give the CA\'s certificate' : 'FORWARD_PROXY_CA_CERT_FILE is set without FORWARD_PROXY_CA_KEY_FILE: give the CA\'s key')
  } else {
    ca = { certFile: resolve(o.cwd, o.caCert), keyFile: resolve(o.cwd, o.caKey), names: FORWARD_CA_NAMES }
    const problem = caProblem(ca.certFile, ca.keyFile)
    if (problem !== undefined) problems.push(problem)
  }
  return { port: o.port, ...(ca !== undefined && { ca }), allow: allowPatterns(o.allow, problems) }
}

/** What is wrong with a CA pair, naming the variables (never the content); undefined when it can sign. */
export function caProblem (certFile: string, keyFile: string, read: (file: string) => string = readSecretFileSync): string | undefined {
  const { cert, key } = FORWARD_CA_NAMES
  let certText: string
  let keyText: string
  try { certText = read(certFile) } catch (err) { return `${cert} ${(err as Error).message}` }
  try { keyText = read(keyFile) } catch (err) { return `${key} ${(err as Error).message}` }
  let certificate: X509Certificate
  try {
    certificate = new X509Certificate(certText)
  } catch {
    return `${cert} holds no PEM certificate`
  }
  if (!certificate.ca) return `${cert} holds a certificate that is not a CA (its basic constraints must say CA:TRUE)`
  if (/-----BEGIN ENCRYPTED PRIVATE KEY-----|Proc-Type: 4,ENCRYPTED/.test(keyText)) return `${key} holds an encrypted key: give it unencrypted`
  let privateKey
  try {
    privateKey = createPrivateKey({ key: keyText, format: 'pem' })
  } catch {
    return `${key} holds no PEM private key`
  }
  const type = privateKey.asymmetricKeyType
  const curve = privateKey.asymmetricKeyDetails?.namedCurve
  if (!(type === 'rsa' || type === 'ed25519' || (type === 'ec' && (curve === 'prime256v1' || curve === 'secp384r1')))) {
    return `${key} holds a key that cannot sign here (${type ?? 'unknown'}${curve === undefined ? '' : ` ${curve}`}): EC P-256 or P-384, RSA or Ed25519`
  }
  if (!certificate.checkPrivateKey(privateKey)) return `${key} holds a key that is not the one of the CA in ${cert}`
  return undefined
}

/** FORWARD_PROXY_ALLOW's patterns; each one it cannot read is named. */
function allowPatterns (value: string | undefined, problems: string[]): AllowPattern[] {
  const patterns: AllowPattern[] = []
  for (const entry of (value ?? '').split(',').map((e) => e.trim()).filter(Boolean)) {
    const pattern = allowPattern(entry.toLowerCase())
    if (pattern === undefined) problems.push(`FORWARD_PROXY_ALLOW holds ${JSON.stringify(entry.slice(0, 80))}, which is no host, *.domain, IP address or any of them with :port`)
    else patterns.push(pattern)
  }
  return patterns
}

const HOST = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/

function allowPattern (entry: string): AllowPattern | undefined {
  // [v6]:port, v6, host:port, v4:port, host
  const bracketed = /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(entry)
  let host = entry
  let port: string | undefined
  if (bracketed !== null) [host, port] = [bracketed[1]!, bracketed[2]]
  else if (isIP(entry) !== 6 && entry.includes(':')) [host, port] = [entry.slice(0, entry.lastIndexOf(':')), entry.slice(entry.lastIndexOf(':') + 1)]
  if (port !== undefined && (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535)) return undefined
  const withPort = port === undefined ? {} : { port: Number(port) }
  // an address with a zone (fe80::1%eth0) names an interface's link, not a destination
  if (host.includes('%')) return undefined
  if (isIP(host) !== 0) return { host: normalizeIp(host), kind: 'ip', ...withPort }
  if (bracketed !== null) return undefined
  if (host.startsWith('*.') && HOST.test(host.slice(2))) return { host: host.slice(2), kind: 'domain', ...withPort }
  return HOST.test(host) ? { host, kind: 'host', ...withPort } : undefined
}

/** An IP address as the URL parser writes it (IPv6 compressed, lower case), so that patterns and destinations compare. */
export function normalizeIp (address: string): string {
  return isIP(address) === 6 ? new URL(`http://[${address}]/`).hostname.slice(1, -1) : address
}
