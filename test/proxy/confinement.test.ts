import t from 'tap'
import { isConfined } from '../../src/proxy/confine.js'
import { build, rawRequest, statusOf, until } from '../helpers/build.js'

const HOSTILE = [
  'http://127.0.0.2:1/steal',
  'https://evil.example/x',
  '//evil.example/x',
  '//127.0.0.2:1/x',
  '/..',
  '/../etc/passwd',
  '/a/../../x',
  '/a/./b',
  '/%2e%2e/x',
  '/%2E%2E/x',
  '/%2e./x',
  '/.%2E/x',
  '/a%2f..%2f..%2fx',
  '/a%2F%2E%2E%2Fx',
  '/%252e%252e/x',
  '/%25252e%25252e/x',
  '/a\\..\\x',
  '/a%5c..%5cx',
  '/a%5C..%5Cx',
  '\\\\evil/x',
  '*',
  'evil.example:443'
]

t.test('isConfined refuses every escape and keeps legitimate paths', async (t) => {
  for (const target of HOSTILE) t.equal(isConfined(target), false, target)
  for (const target of ['/', '/a/b', '/files/%20a', '/files/[...slug]', '/dir/', '/a.b/c..d', '/x?next=../../y', '/x?u=http://a/b', '/%41']) {
    t.equal(isConfined(target), true, target)
  }
})

t.test('hostile request targets get 400 and reach nothing', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  for (const target of HOSTILE) {
    const raw = await rawRequest(h.proxyPort, `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`)
    t.equal(statusOf(raw), 400, `${target} → ${raw.split('\r\n')[0]}`)
  }
  t.equal(h.upstream.received.length, 0, 'the upstream saw none of them')
  const next = await rawRequest(h.proxyPort, 'GET /fine HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n')
  t.equal(statusOf(next), 200, 'and the next request is served')
})
