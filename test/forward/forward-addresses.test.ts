import { EventEmitter } from 'node:events'
import { createServer as createHttpServer } from 'node:http'
import { createServer, Socket, type AddressInfo } from 'node:net'
import { networkInterfaces } from 'node:os'
import t from 'tap'
import { createMetrics } from '../../src/admin/metrics.js'
import { loadConfig } from '../../src/config/load.js'
import { ForbiddenAddressError } from '../../src/errors.js'
import { canonicalAddress, checkedAddress, type Lookup } from '../../src/forward/destinations.js'
import { ForwardProxy } from '../../src/forward/proxy.js'
import type { ProxyEvents } from '../../src/proxy/context.js'
import { RequestBudget } from '../../src/proxy/request-budget.js'
import { rawRequest, statusOf } from '../helpers/build.js'
import { captureLogger } from '../helpers/log.js'

// Names resolve through a lookup the test injects: the machine's resolver
// is never asked, and these addresses are not the machine's.
const METADATA: Record<string, string[]> = {
  'imds6.test': ['fd00:ec2::254'],
  'imds6-long.test': ['FD00:0EC2:0:0:0:0:0:254'],
  'pod-identity.test': ['fd00:ec2::23'],
  'nat64.test': ['64:ff9b::a9fe:a9fe'],
  'nat64-dotted.test': ['64:ff9b::169.254.169.254'],
  'alibaba.test': ['100.100.100.200'],
  'alibaba-mapped.test': ['::ffff:100.100.100.200'],
  'compatible.test': ['::7f00:1'],
  'compatible-dotted.test': ['::127.0.0.1'],
  'mapped.test': ['::ffff:7f00:1'],
  'mapped-long.test': ['0:0:0:0:0:ffff:127.0.0.1'],
  'translated.test': ['::ffff:0:7f00:1'],
  'zoned.test': ['fe80::1%eth0'],
  // one good answer does not make a bad one reachable
  'mixed.test': ['192.0.2.80', '100.100.100.200'],
  'garbage.test': ['not-an-address']
}

/** A lookup over a fixed table, which keeps the names it was asked. */
function tableLookup (table: Record<string, string[]>): Lookup & { asked: string[] } {
  const asked: string[] = []
  const lookup = async (hostname: string): Promise<Array<{ address: string }>> => {
    asked.push(hostname)
    const addresses = table[hostname]
    if (addresses === undefined) throw Object.assign(new Error(`no such name: ${hostname}`), { code: 'ENOTFOUND' })
    return addresses.map((address) => ({ address }))
  }
  return Object.assign(lookup, { asked })
}

/** This host's first non-loopback IPv4 address, as the kubelet would reach the admin port at it. */
function ownIpv4 (): string | undefined {
  for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address
  return undefined
}

/**
 * Every connection the process opens is seen here before it is made, and
 * only those to `permitted` addresses are made: anything else is recorded
 * and fails as refused, so that no packet ever leaves for an address a
 * test names.
 */
function guardDials (t: Test, permitted: (host: string) => boolean): string[] {
  const attempted: string[] = []
  const original = Socket.prototype.connect
  Socket.prototype.connect = function (this: Socket, ...args: unknown[]) {
    const first = Array.isArray(args[0]) ? (args[0] as unknown[])[0] : args[0]
    const host = typeof first === 'object' && first !== null ? (first as { host?: string, path?: string }).host ?? (first as { path?: string }).path : args[1] as string | undefined
    if (host !== undefined && !permitted(host)) {
      attempted.push(host)
      process.nextTick(() => this.destroy(Object.assign(new Error(`the test let no connection to ${host} out`), { code: 'ECONNREFUSED' })))
      return this
    }
    return (original as (...a: unknown[]) => Socket).apply(this, args)
  } as typeof Socket.prototype.connect
  t.teardown(() => { Socket.prototype.connect = original })
  return attempted
}
type Test = import('tap').Test

/** The head of the proxy's answer to `text` (a CONNECT's, which has no body); the connection is then closed. */
function headOf (port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = new Socket()
    let got = ''
    socket.on('error', reject)
    socket.on('close', () => resolve(got))
    socket.on('data', (chunk: Buffer) => {
      got += chunk.toString('latin1')
      if (got.includes('\r\n\r\n')) socket.destroy()
    })
    socket.connect(port, '127.0.0.1', () => socket.write(text))
  })
}

/** A forward proxy with no route, `allow` its FORWARD_PROXY_ALLOW, names resolved by `lookup`, `ownPorts` the sidecar's. */
async function forwardProxy (t: Test, allow: string, lookup: Lookup, ownPorts: number[] = []): Promise<{ port: number, counts: () => Promise<Record<string, number>> }> {
  const config = loadConfig({
    BASE_URL: 'http://127.0.0.1:9/api',
    AUTH_URL: 'http://127.0.0.1:9',
    AUTH_CLIENT_ID: 'legacy-app',
    AUTH_USERNAME: 'svc',
    AUTH_PASSWORD: 'pw-secret-123',
    FORWARD_PROXY_PORT: '0',
    FORWARD_PROXY_ALLOW: allow,
    UPSTREAM_TIMEOUT_MS: '2000'
  }, { cwd: '/nonexistent' })
  const events = new EventEmitter<ProxyEvents>()
  const metrics = createMetrics([])
  metrics.watchProxy(events)
  metrics.watchForwardProxy(events)
  const log = captureLogger()
  const proxy = new ForwardProxy({ upstream: config.upstream, settings: config.forward!, ca: undefined, routes: [], listener: { budget: new RequestBudget(16, 16), log: log.logger, events }, ownPorts: () => ownPorts, lookup })
  await proxy.listener.app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(async () => {
    await proxy.listener.app.close()
    await proxy.close()
  })
  const counts = async (): Promise<Record<string, number>> => {
    const text = await metrics.registry.metrics()
    const counts: Record<string, number> = {}
    for (const [, outcome, value] of text.matchAll(/^auth_sidecar_forward_connections_total\{outcome="(\w+)"\} (\d+)$/gm)) counts[outcome!] = Number(value)
    return counts
  }
  return { port: (proxy.listener.app.server.address() as AddressInfo).port, counts }
}

t.test('names that resolve to cloud metadata or to loopback in another spelling are refused; an IP pattern opens them', async (t) => {
  const lookup = tableLookup({ ...METADATA, 'public.test': ['192.0.2.80'], 'public6.test': ['2001:db8::80'], 'nat64-public.test': ['64:ff9b::c000:250'], 'ula.test': ['fd00:ec2::1'] })
  const byName = { host: 'test', kind: 'domain' as const }
  for (const [name, addresses] of Object.entries(METADATA)) {
    await t.rejects(checkedAddress({ hostname: name, port: 80 }, byName, () => [], lookup), ForbiddenAddressError, `${name} (${addresses.join(', ')})`)
  }
  for (const [name, address] of [['public.test', '192.0.2.80'], ['public6.test', '2001:db8::80'], ['nat64-public.test', '64:ff9b::c000:250'], ['ula.test', 'fd00:ec2::1']] as const) {
    t.equal(await checkedAddress({ hostname: name, port: 80 }, byName, () => [], lookup), address, `${name}: reached, at the address checked`)
  }
  const asked = lookup.asked.length
  t.equal(await checkedAddress({ hostname: '100.100.100.200', port: 80 }, { host: '100.100.100.200', kind: 'ip' }, () => [], lookup), '100.100.100.200', 'an explicit IP pattern')
  t.equal(await checkedAddress({ hostname: 'fd00:ec2::254', port: 80 }, { host: 'fd00:ec2::254', kind: 'ip' }, () => [], lookup), 'fd00:ec2::254')
  t.equal(lookup.asked.length, asked, 'an IP pattern asks no resolver')
})

t.test('an address in any spelling is the host it reaches', async (t) => {
  for (const spelling of ['::ffff:127.0.0.1', '::ffff:7f00:1', '0:0:0:0:0:ffff:127.0.0.1', '::FFFF:7F00:0001', '::7f00:1', '::127.0.0.1', '::ffff:0:127.0.0.1', '64:ff9b::7f00:1', '64:ff9b::127.0.0.1']) {
    t.same(canonicalAddress(spelling), { address: '127.0.0.1', family: 'ipv4' }, spelling)
  }
  t.same(canonicalAddress('::1'), { address: '0000:0000:0000:0000:0000:0000:0000:0001', family: 'ipv6' }, '::1 is IPv6\'s own loopback')
  t.same(canonicalAddress('::'), { address: '0000:0000:0000:0000:0000:0000:0000:0000', family: 'ipv6' })
  t.same(canonicalAddress('fe80::1%eth0'), { address: 'fe80:0000:0000:0000:0000:0000:0000:0001', family: 'ipv6' }, 'without its zone')
  t.equal(canonicalAddress('64:ff9b:1::7f00:1')?.family, 'ipv6', 'a local-use NAT64 prefix is no well-known one')
  t.equal(canonicalAddress('0177.0.0.1'), undefined, 'no resolver answers in octal')
})

t.test('through the proxy: a CONNECT or a request for a name that resolves to a metadata address is 403, nothing dialled', async (t) => {
  const lookup = tableLookup(METADATA)
  // the proxy's own clients come from 127.0.0.1; every other dial is refused and recorded
  const dialled = guardDials(t, (host) => host === '127.0.0.1')
  const proxy = await forwardProxy(t, '*.test', lookup)
  const names = Object.keys(METADATA)
  for (const name of names) {
    const connect = await rawRequest(proxy.port, `CONNECT ${name}:80 HTTP/1.1\r\nHost: ${name}:80\r\n\r\n`)
    t.equal(statusOf(connect), 403, `CONNECT ${name}: ${connect}`)
    const plain = await rawRequest(proxy.port, `GET http://${name}/latest/meta-data/ HTTP/1.1\r\nHost: ${name}\r\n\r\n`)
    t.equal(statusOf(plain), 403, `GET http://${name}/: ${plain}`)
    t.match(plain, /"error":"destination_not_allowed"/)
  }
  t.ok(names.every((name) => lookup.asked.includes(name)), 'each name was resolved, by the lookup given')
  t.same(dialled, [], 'and nothing was dialled')
  t.same(await proxy.counts(), { intercepted: 0, tunnelled: 0, refused: names.length * 2 }, 'each refused once')

  // IP literals in other spellings are IP addresses: no domain pattern lets them through
  const asked = lookup.asked.length
  for (const target of ['2130706433:80', '0177.0.0.1:80', '0x7f.1:80', '[::ffff:7f00:1]:80', '[0:0:0:0:0:ffff:127.0.0.1]:80', '[fd00:ec2::254]:80', '[64:ff9b::a9fe:a9fe]:80', '100.100.100.200:80', 'imds6.test.:80']) {
    const connect = await rawRequest(proxy.port, `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`)
    t.equal(statusOf(connect), 403, `CONNECT ${target}`)
    const plain = await rawRequest(proxy.port, `GET http://${target}/ HTTP/1.1\r\nHost: x\r\n\r\n`)
    t.equal(statusOf(plain), 403, `GET http://${target}/`)
  }
  t.equal(lookup.asked.length, asked, 'not even resolved')
  t.same(dialled, [])
})

t.test('through the proxy: a name that resolves to this host in IPv4-mapped form never reaches the sidecar\'s own ports', async (t) => {
  const own = ownIpv4()
  if (own === undefined) {
    if (process.env.CI === 'true') t.fail('this host has no non-loopback IPv4 address to try')
    else t.plan(0, 'this host has no non-loopback IPv4 address')
    return
  }
  // the admin port, listening on every address as for the kubelet; and another server of the pod's, not the sidecar's
  let adminReached = 0
  const admin = createHttpServer((_req, res) => { adminReached++; res.end('metrics') })
  admin.on('connection', () => adminReached++)
  await new Promise<void>((resolve) => admin.listen(0, '0.0.0.0', resolve))
  t.teardown(() => admin.close())
  const other = createServer((socket) => socket.pipe(socket))
  await new Promise<void>((resolve) => other.listen(0, '::', resolve))
  t.teardown(() => other.close())
  const adminPort = (admin.address() as AddressInfo).port
  const otherPort = (other.address() as AddressInfo).port
  const hex = own.split('.').map(Number)
  const nat64 = `64:ff9b::${((hex[0]! << 8) | hex[1]!).toString(16)}:${((hex[2]! << 8) | hex[3]!).toString(16)}`
  const lookup = tableLookup({ 'pod.test': [`::ffff:${own}`], 'pod-nat64.test': [nat64], 'pod-v4.test': [own] })
  const dialled = guardDials(t, (host) => host === '127.0.0.1' || canonicalAddress(host)?.address === own)
  const proxy = await forwardProxy(t, '*.test', lookup, [adminPort])

  for (const name of ['pod.test', 'pod-nat64.test', 'pod-v4.test']) {
    const connect = await rawRequest(proxy.port, `CONNECT ${name}:${adminPort} HTTP/1.1\r\nHost: ${name}:${adminPort}\r\n\r\n`)
    t.equal(statusOf(connect), 403, `CONNECT ${name}:<admin port>: ${connect}`)
    const plain = await rawRequest(proxy.port, `GET http://${name}:${adminPort}/metrics HTTP/1.1\r\nHost: x\r\n\r\n`)
    t.equal(statusOf(plain), 403, `GET http://${name}:<admin port>/metrics`)
  }
  t.equal(adminReached, 0, 'the admin port was never reached')
  t.same(dialled, [])

  // the same address on a port that is not the sidecar's is allowed by the name
  const tunnel = await headOf(proxy.port, `CONNECT pod.test:${otherPort} HTTP/1.1\r\nHost: pod.test:${otherPort}\r\n\r\n`)
  t.equal(statusOf(tunnel), 200, 'a port of the pod that is not the sidecar\'s is tunnelled')
  t.same(await proxy.counts(), { intercepted: 0, tunnelled: 1, refused: 6 })
})
