import t from 'tap'
import { proxyFor } from '../../src/connector.js'

const egress = (noProxy?: string): { httpProxy: string, httpsProxy: string, noProxy?: string } => ({
  httpProxy: 'http://proxy.internal:3128',
  httpsProxy: 'http://secure-proxy.internal:3128',
  ...(noProxy !== undefined && { noProxy })
})
const via = (origin: string, noProxy?: string): string | undefined => proxyFor(egress(noProxy), new URL(origin))?.host

t.test('https goes through HTTPS_PROXY, http through HTTP_PROXY; none set, none used', async (t) => {
  t.equal(via('https://api.example.com'), 'secure-proxy.internal:3128')
  t.equal(via('http://api.example.com'), 'proxy.internal:3128')
  t.equal(proxyFor({ httpProxy: 'http://proxy.internal:3128' }, new URL('https://api.example.com')), undefined, 'HTTP_PROXY alone does not carry https')
})

t.test('NO_PROXY: a name covers itself and its subdomains, a leading dot or *. is the same, * is everything', async (t) => {
  t.equal(via('https://api.example.com', 'api.example.com'), undefined)
  t.equal(via('https://v2.api.example.com', 'example.com'), undefined)
  t.equal(via('https://example.com', '.example.com'), undefined)
  t.equal(via('https://api.example.com', '*.example.com'), undefined)
  t.equal(via('https://API.Example.COM', 'api.example.com'), undefined, 'names are compared without case')
  t.equal(via('https://notexample.com', 'example.com'), 'secure-proxy.internal:3128', 'a name is not a suffix of letters')
  t.equal(via('https://api.example.com', 'other.org, *'), undefined)
  t.equal(via('https://api.example.com', 'other.org\texample.org'), 'secure-proxy.internal:3128')
})

t.test('NO_PROXY: an entry with a port covers that port only, the scheme\'s default included', async (t) => {
  t.equal(via('https://api.example.com', 'api.example.com:443'), undefined)
  t.equal(via('https://api.example.com:8443', 'api.example.com:443'), 'secure-proxy.internal:3128')
  t.equal(via('http://127.0.0.1:8080', '127.0.0.1:8080'), undefined)
  t.equal(via('http://[::1]:8080', '[::1]'), undefined, 'an IPv6 address in its brackets')
  t.equal(via('http://[::1]:8080', '[::1]:9090'), 'proxy.internal:3128')
})
