import { BlockList, isIPv4, isIPv6 } from 'node:net'
import { networkInterfaces } from 'node:os'
import type { TracingSettings } from './types.js'
import { bypassesProxy, hostOf, portOf } from './no-proxy.js'

/** DEFAULT_SERVICE_NAME names the sidecar's spans unless the operator named the service. */
export const DEFAULT_SERVICE_NAME = 'auth-sidecar'

/**
 * Tracing is on when OTEL_TRACES_EXPORTER names an exporter (`none`, or
 * unset, is off), from the process's environment, where the SDK reads the
 * rest of its settings. An exporter that would send to one of the
 * sidecar's own proxy `ports` on `proxyHost`, directly or through an
 * egress proxy, is a problem: the sidecar would trace its own exports.
 */
export function tracingOf (env: NodeJS.ProcessEnv, proxyHost: string, ports: OwnPort[], problems: string[]): TracingSettings | undefined {
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '').split(',').map((e) => e.trim()).filter((e) => e !== '')
  if (exporters.length === 0 || exporters.includes('none')) return undefined
  problems.push(...exporterLoops(env, exporters, proxyHost, ports))
  const named = (env.OTEL_SERVICE_NAME ?? '') !== '' || /(^|,)\s*service\.name\s*=/.test(env.OTEL_RESOURCE_ATTRIBUTES ?? '')
  return { exporter: exporters.join(','), serviceName: named ? undefined : DEFAULT_SERVICE_NAME }
}

/** One of the sidecar's own proxy listeners on PROXY_HOST, by the variable that sets its port. */
export interface OwnPort {
  variable: string
  port: number
}

/** Where a trace exporter sends, and the variable that says so (or would: `unset` for the SDK's default). */
interface Endpoint {
  variable: string
  url: URL
  unset: boolean
  grpc: boolean
}

/** Addresses that are this host whatever its interfaces: loopback, and the unspecified ones, which connect to it. */
const THIS_HOST = new BlockList()
THIS_HOST.addSubnet('127.0.0.0', 8, 'ipv4')
THIS_HOST.addAddress('0.0.0.0', 'ipv4')
THIS_HOST.addAddress('::1', 'ipv6')
THIS_HOST.addAddress('::', 'ipv6')
THIS_HOST.addSubnet('::ffff:127.0.0.0', 104, 'ipv6')
THIS_HOST.addAddress('::ffff:0.0.0.0', 'ipv6')

/**
 * The configuration problems of an exporter whose spans would come back to
 * the sidecar: its endpoint (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
 * OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_ZIPKIN_ENDPOINT, or the SDK's
 * default when unset), or the egress proxy it would be sent through, is
 * one of the sidecar's own proxy ports on this host. The proxy would add a
 * route's token, send the export upstream and trace that too: a batch every
 * interval, for ever. `env` is the process's environment, the only one the
 * SDK, Node and gRPC read.
 */
function exporterLoops (env: NodeJS.ProcessEnv, exporters: readonly string[], proxyHost: string, ports: readonly OwnPort[]): string[] {
  const own = ports.filter((p) => p.port !== 0)
  if (own.length === 0) return []
  const problems: string[] = []
  for (const endpoint of endpointsOf(env, exporters)) {
    const port = portOf(endpoint.url)
    const hit = isOwnHost(endpoint.url.hostname, proxyHost) ? own.find((p) => p.port === port) : undefined
    if (hit !== undefined) {
      const what = endpoint.unset
        ? `${endpoint.variable} is unset, and the exporter's default, ${endpoint.url.origin}, is`
        : `${endpoint.variable} points at`
      problems.push(`${what} the sidecar's own ${hit.variable} (${hit.port}): the spans would go through its proxy with a route's token, and make more spans for ever; set it to the collector's address`)
      continue
    }
    const proxy = egressProxyOf(env, endpoint)
    if (proxy === undefined) continue
    const through = isOwnHost(proxy.url.hostname, proxyHost) ? own.find((p) => p.port === portOf(proxy.url)) : undefined
    if (through !== undefined) {
      problems.push(`${endpoint.variable}: the exporter would send through ${proxy.variable}, the sidecar's own ${through.variable} (${through.port}), adding a route's token to its spans and making more for ever; name the collector's host in NO_PROXY, or unset ${proxy.variable} for the sidecar`)
    }
  }
  return problems
}

/** The endpoints the exporters named in OTEL_TRACES_EXPORTER send to, as the SDK reads them. */
function endpointsOf (env: NodeJS.ProcessEnv, exporters: readonly string[]): Endpoint[] {
  const set = (name: string): string | undefined => {
    const v = env[name]?.trim()
    return v === undefined || v === '' ? undefined : v
  }
  const endpoints: Endpoint[] = []
  const add = (variable: string, value: string | undefined, fallback: string, grpc: boolean): void => {
    const url = urlOf(value ?? fallback)
    if (url !== undefined) endpoints.push({ variable, url, unset: value === undefined, grpc })
  }
  if (exporters.includes('otlp')) {
    const grpc = (set('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') ?? set('OTEL_EXPORTER_OTLP_PROTOCOL')) === 'grpc'
    const traces = set('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT')
    if (traces !== undefined) add('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', traces, '', grpc)
    else add('OTEL_EXPORTER_OTLP_ENDPOINT', set('OTEL_EXPORTER_OTLP_ENDPOINT'), grpc ? 'http://localhost:4317' : 'http://localhost:4318', grpc)
  }
  if (exporters.includes('zipkin')) add('OTEL_EXPORTER_ZIPKIN_ENDPOINT', set('OTEL_EXPORTER_ZIPKIN_ENDPOINT'), 'http://localhost:9411/api/v2/spans', false)
  return endpoints
}

/** A URL, `host:port` (gRPC's form) read as http; undefined for what the SDK would refuse itself. */
function urlOf (value: string): URL | undefined {
  try {
    return new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(value) ? value : `http://${value}`)
  } catch {
    return undefined
  }
}

/**
 * The egress proxy an export to `endpoint` may go through, unless NO_PROXY
 * names its host: gRPC's client takes grpc_proxy, https_proxy or
 * http_proxy (and no_grpc_proxy or no_proxy); Node's own HTTP client takes
 * HTTPS_PROXY for https and HTTP_PROXY for http, either case, when it is
 * told to (NODE_USE_ENV_PROXY). Either is taken as used.
 */
function egressProxyOf (env: NodeJS.ProcessEnv, endpoint: Endpoint): { variable: string, url: URL } | undefined {
  const first = (names: string[]): { variable: string, value: string } | undefined => {
    for (const name of names) {
      const value = env[name]?.trim()
      if (value !== undefined && value !== '') return { variable: name, value }
    }
    return undefined
  }
  const proxy = endpoint.grpc
    ? first(['grpc_proxy', 'https_proxy', 'http_proxy', 'HTTPS_PROXY', 'HTTP_PROXY'])
    : endpoint.url.protocol === 'https:' ? first(['HTTPS_PROXY', 'https_proxy']) : first(['HTTP_PROXY', 'http_proxy'])
  if (proxy === undefined) return undefined
  const noProxy = first(endpoint.grpc ? ['no_grpc_proxy', 'no_proxy', 'NO_PROXY'] : ['NO_PROXY', 'no_proxy'])?.value ?? ''
  if (bypassesProxy(noProxy, endpoint.url)) return undefined
  const url = urlOf(proxy.value)
  return url === undefined ? undefined : { variable: proxy.variable, url }
}

/**
 * Whether `hostname` is this host's proxy address: a loopback name or
 * address, an unspecified one, PROXY_HOST itself, or, when PROXY_HOST is
 * unspecified (every address), one of this host's interfaces' addresses.
 * A name is not resolved: only `localhost` and its subdomains are known
 * to be this host.
 */
function isOwnHost (hostname: string, proxyHost: string): boolean {
  const host = hostOf(hostname)
  const listening = hostOf(proxyHost)
  if (host === listening) return true
  if (host === 'localhost' || host.endsWith('.localhost')) return true
  const family = isIPv4(host) ? 'ipv4' : isIPv6(host) ? 'ipv6' : undefined
  if (family === undefined) return false
  if (THIS_HOST.check(host, family)) return true
  if (listening !== '0.0.0.0' && listening !== '::') return false
  return Object.values(networkInterfaces()).some((addresses) => addresses?.some((a) => hostOf(a.address.replace(/%.*$/, '')) === host) ?? false)
}
