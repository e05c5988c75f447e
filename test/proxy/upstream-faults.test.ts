import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { createServer, type Server, type Socket } from 'node:net'
import { Agent, request as httpRequest } from 'node:http'
import t, { type Test } from 'tap'
import { build, metric, rawRequest, send, statusOf, until, type Reply } from '../helpers/build.js'

/**
 * A raw TCP upstream: `answer(requestHead, socket, index)` decides what each
 * request on each connection gets, byte for byte.
 */
async function rawUpstream (t: Test, answer: (head: string, socket: Socket, nthOnSocket: number) => void): Promise<{ url: string, requests: string[] }> {
  const requests: string[] = []
  const server: Server = createServer((socket) => {
    let buffered = ''
    let n = 0
    socket.on('data', (c: Buffer) => {
      buffered += c.toString('latin1')
      let end: number
      while ((end = buffered.indexOf('\r\n\r\n')) !== -1) {
        const head = buffered.slice(0, end)
        const length = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0)
        if (buffered.length < end + 4 + length) return
        buffered = buffered.slice(end + 4 + length)
        requests.push(head)
        answer(head, socket, n++)
      }
    })
    socket.on('error', () => {})
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => { server.close(() => resolve()) }))
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, requests }
}

const OK = 'HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: keep-alive\r\n\r\nok'

t.test('a stale pooled socket is retried once for idempotent requests, never for one with a body', async (t) => {
  // The second request on every connection finds it closed, as when the
  // upstream's keep-alive timeout races the next request.
  const up = await rawUpstream(t, (_head, socket, n) => {
    if (n === 0) socket.write(OK)
    else socket.destroy()
  })
  const h = await build(t, { BASE_URL: up.url, UPSTREAM_CONNECTIONS: '1' })
  await until(() => h.app.credential.ready())
  t.equal((await send(`${h.proxyUrl}/a`)).status, 200)
  const get = await send(`${h.proxyUrl}/b`)
  t.equal(get.status, 200, 'GET retried on a fresh connection')
  t.equal(up.requests.filter((r) => r.startsWith('GET /b ')).length, 2, 'sent twice: the dead socket, then a new one')

  const post = await send(`${h.proxyUrl}/c`, { method: 'POST', body: 'payload' })
  t.equal(post.status, 502, 'a POST is not replayed: 502')
  t.equal(up.requests.filter((r) => r.startsWith('POST /c ')).length, 1)
})

t.test('a GET answered 503 is relayed, not silently retried', async (t) => {
  const up = await rawUpstream(t, (_head, socket) => {
    socket.write('HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\nretry-after: 0\r\n\r\nbusy')
  })
  const h = await build(t, { BASE_URL: up.url })
  await until(() => h.app.credential.ready())
  const res = await send(`${h.proxyUrl}/x`)
  t.equal(res.status, 503)
  t.equal(res.body, 'busy')
  t.equal(up.requests.length, 1)
})

t.test('an invalid upstream status code gives 502, and the process keeps serving', async (t) => {
  const up = await rawUpstream(t, (head, socket) => {
    if (head.startsWith('GET /weird')) socket.end('HTTP/1.1 999 Weird\r\ncontent-length: 0\r\n\r\n')
    else if (head.startsWith('GET /zero')) socket.end('HTTP/1.1 099 Low\r\ncontent-length: 0\r\n\r\n')
    else socket.write(OK)
  })
  const h = await build(t, { BASE_URL: up.url })
  await until(() => h.app.credential.ready())
  t.equal((await send(`${h.proxyUrl}/weird`)).status, 502)
  t.equal((await send(`${h.proxyUrl}/zero`)).status, 502)
  t.equal((await send(`${h.proxyUrl}/fine`)).status, 200)
})

t.test('an upstream that resets mid-response: the client connection is cut, the next request is served', async (t) => {
  const up = await rawUpstream(t, (head, socket) => {
    if (head.startsWith('GET /half')) {
      socket.write('HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n' + 'x'.repeat(100))
      setTimeout(() => socket.destroy(), 50)
    } else socket.write(OK)
  })
  const h = await build(t, { BASE_URL: up.url })
  await until(() => h.app.credential.ready())
  const cut = await send(`${h.proxyUrl}/half`).then((r) => r.body.length, (e: Error) => e.message)
  t.not(cut, 1000, 'the client does not get a complete-looking body')
  t.equal((await send(`${h.proxyUrl}/fine`)).status, 200)
})

t.test('malformed client input: a 4xx or a closed connection, and the next request is served', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const cases: Array<[string, string]> = [
    ['oversized headers', `GET /a HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`],
    ['Content-Length and Transfer-Encoding', 'POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'],
    ['two different Content-Length', 'POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!'],
    ['invalid header bytes', 'GET /a HTTP/1.1\r\nHost: x\r\nX-Bad: a\x00b\r\n\r\n'],
    ['invalid header name', 'GET /a HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n'],
    ['very long URL', `GET /${'a'.repeat(70_000)} HTTP/1.1\r\nHost: x\r\n\r\n`],
    ['not HTTP at all', 'HELLO\r\n\r\n']
  ]
  for (const [name, text] of cases) {
    const raw = await rawRequest(h.proxyPort, text, 2_000)
    const status = statusOf(raw)
    t.ok(raw === '' || (status >= 400 && status < 500), `${name}: ${raw.split('\r\n')[0] || 'connection closed'}`)
  }
  t.equal(h.upstream.received.length, 0, 'none reached the upstream')
  t.equal((await send(`${h.proxyUrl}/after`)).status, 200, 'the next request is served')
})

t.test('clients that leave: their queued requests never reach the upstream, those in flight are aborted and not sent again', async (t) => {
  const h = await build(t, { UPSTREAM_CONNECTIONS: '4', UPSTREAM_TIMEOUT_MS: '30000' })
  await until(() => h.app.credential.ready())
  const clients = Array.from({ length: 100 }, (_, i) => {
    const req = httpRequest(`${h.proxyUrl}/_slow/60000?${i}`, { agent: false })
    req.on('error', () => {})
    req.end()
    return req
  })
  await until(() => h.upstream.received.length === 4)
  await new Promise((resolve) => setTimeout(resolve, 100))
  for (const req of clients) req.destroy()
  await until(() => h.upstream.inFlight === 0, 2_000).catch(() => {})
  t.equal(h.upstream.inFlight, 0, 'the four in flight were aborted, their connections closed')
  await new Promise((resolve) => setTimeout(resolve, 1_000))
  t.equal(h.upstream.received.length, 4, 'none of the 96 queued ones was sent, and nothing was sent again')
  // undici replaces each connection it closed to abort a request in flight, for that dead request: at most 4 more
  t.ok(h.upstream.connections <= 8, `and no connection was opened for them (${h.upstream.connections} in all)`)
  const failures = h.log.records().filter((r) => r.msg === 'upstream request failed')
  t.same(failures, [], 'not logged as the upstream\'s failure')
  t.equal(await metric(h.adminUrl, 'auth_sidecar_upstream_errors_total{reason="reset",route="default"}'), 0)
  t.equal((await send(`${h.proxyUrl}/after`)).status, 200, 'the pool serves the next client')
})

t.test('300 clients that leave together, a slow upstream, 128 connections: the 128 in flight aborted, none of the 172 queued sent, no connection opened for them', async (t) => {
  const h = await build(t, { UPSTREAM_TIMEOUT_MS: '30000' })
  await until(() => h.app.credential.ready())
  const clients = Array.from({ length: 300 }, (_, i) => {
    const req = httpRequest(`${h.proxyUrl}/_slow/60000?${i}`, { agent: false })
    req.on('error', () => {})
    req.end()
    return req
  })
  await until(() => h.upstream.received.length === 128, 10_000)
  // the others are read and queued by now
  await new Promise((resolve) => setTimeout(resolve, 500))
  for (const req of clients) req.destroy()
  await until(() => h.upstream.inFlight === 0, 3_000).catch(() => {})
  await new Promise((resolve) => setTimeout(resolve, 500))
  t.equal(h.upstream.inFlight, 0, 'the 128 in flight were aborted')
  t.equal(h.upstream.received.length, 128, 'none of the queued ones was sent')
  // undici replaces each connection it closed to abort a request in flight, for that dead request: at most 128 more
  t.ok(h.upstream.connections <= 256, `and no connection was opened for them (${h.upstream.connections} in all)`)
})

t.test('300 clients of a load generator that leave together, a slow upstream, 128 connections: a place freed by one client that left is never handed to another that has left too', async (t) => {
  const h = await build(t, { UPSTREAM_TIMEOUT_MS: '30000' })
  await until(() => h.app.credential.ready())
  const left = join(t.testdir({}), 'left')
  // the clients in a process of their own, as a load generator's
  const clients = spawn(process.execPath, ['-e', `
    const { request } = require('node:http')
    const { writeFileSync } = require('node:fs')
    const requests = []
    let closed = 0
    for (let i = 0; i < 300; i++) {
      const req = request('${h.proxyUrl}/_slow/10000?' + i, { agent: false })
      req.on('error', () => {})
      req.on('close', () => { if (++closed === 300) process.exit(0) })
      req.end()
      requests.push(req)
    }
    process.stdin.once('data', () => {
      for (const req of requests) req.destroy()
      writeFileSync(${JSON.stringify(left)}, '')
    })
  `], { stdio: ['pipe', 'ignore', 'ignore'] })
  await until(() => h.upstream.received.length === 128, 10_000)
  // the others are read and queued by now
  await new Promise((resolve) => setTimeout(resolve, 500))
  clients.stdin!.write('leave\n')
  // the sidecar is busy while they leave: every departure has arrived when it reads the next one
  const busyUntil = Date.now() + 5_000
  while (!existsSync(left) && Date.now() < busyUntil);
  for (const end = Date.now() + 50; Date.now() < end;);
  await new Promise((resolve) => clients.once('exit', resolve))
  await until(() => h.upstream.inFlight === 0, 3_000).catch(() => {})
  await new Promise((resolve) => setTimeout(resolve, 500))
  t.equal(h.upstream.inFlight, 0, 'every one in flight was aborted')
  t.equal(h.upstream.received.length, 128, `none of the queued ones reached the upstream (${h.upstream.received.length - 128})`)
  // undici replaces each connection it closed to abort a request in flight, for that dead request: at most 128 more
  t.ok(h.upstream.connections <= 256, `no connection was opened for a request whose client had left (${h.upstream.connections} in all)`)
  t.equal((await send(`${h.proxyUrl}/after`)).status, 200, 'the pool serves the next client')
})

t.test('answers without a body that announce a length (304, HEAD, 204): relayed as they are, and the connection kept', async (t) => {
  const answers: Record<string, string> = {
    '/not-modified': 'HTTP/1.1 304 Not Modified\r\netag: "v7"\r\ncontent-length: 1234\r\n\r\n',
    '/no-content': 'HTTP/1.1 204 No Content\r\netag: "v8"\r\n\r\n'
  }
  const up = await rawUpstream(t, (head, socket) => {
    const path = /^\S+ (\S+)/.exec(head)![1]!
    if (head.startsWith('HEAD')) return void socket.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5000\r\n\r\n')
    socket.write(answers[path] ?? OK)
  })
  const h = await build(t, { BASE_URL: up.url })
  await until(() => h.app.credential.ready())
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => agent.destroy())
  const ask = async (method: string, path: string): Promise<Reply> => await new Promise((resolve, reject) => {
    const req = httpRequest(`${h.proxyUrl}${path}`, { method, agent, headers: { 'if-none-match': '"v7"' } }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }))
    })
    req.on('error', reject)
    req.end()
  })
  const notModified = await ask('GET', '/not-modified')
  t.equal(notModified.status, 304, 'a 304 that announces the length of what it stands for')
  t.equal(notModified.headers.etag, '"v7"')
  t.equal(notModified.body, '')
  const head = await ask('HEAD', '/doc')
  t.equal(head.status, 200)
  t.equal(head.headers['content-length'], '5000', 'a HEAD\'s length is the document\'s')
  const noContent = await ask('GET', '/no-content')
  t.equal(noContent.status, 204)
  t.equal((await ask('GET', '/after')).status, 200, 'the next request on the same connection is served')
  t.equal(await metric(h.adminUrl, 'auth_sidecar_upstream_errors_total{reason="unreachable",route="default"}'), 0, 'no failure counted')
})

t.test('the sidecar\'s own error answer carries none of the upstream\'s headers', async (t) => {
  const up = await rawUpstream(t, (_head, socket) => {
    // a status and headers, then a body cut short: the answer fails before the client has any of it
    socket.write('HTTP/1.1 200 OK\r\netag: "upstream-etag"\r\nset-cookie: session=upstream\r\ncontent-length: 10\r\n\r\n')
    setTimeout(() => socket.destroy(), 20)
  })
  const h = await build(t, { BASE_URL: up.url })
  await until(() => h.app.credential.ready())
  const res = await send(`${h.proxyUrl}/x`).catch((err: Error) => err)
  if (res instanceof Error) {
    t.pass(`the answer had begun: the connection is cut (${res.message})`)
    return
  }
  t.equal(res.status, 502)
  t.equal(res.headers.etag, undefined, 'no etag of the upstream\'s')
  t.equal(res.headers['set-cookie'], undefined, 'no cookie of the upstream\'s')
  t.equal(JSON.parse(res.body).error, 'upstream_unreachable')
})

/** Every line logged, raw: no stack trace may be in any. */
const stackIn = (lines: string[]): string[] => lines.filter((l) => /\\n\s+at /.test(l) || /"stack":/.test(l))

t.test('an upstream that closes in the middle of a body: logged and counted as the upstream\'s failure (reset), not as the client leaving', async (t) => {
  const up = await rawUpstream(t, (_head, socket) => {
    socket.write('HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n' + 'x'.repeat(1000))
    setTimeout(() => socket.destroy(), 50)
  })
  const h = await build(t, { BASE_URL: up.url })
  await until(() => h.app.credential.ready())
  await send(`${h.proxyUrl}/half`).catch(() => {})
  await until(() => h.log.records().some((r) => r.msg === 'request'))
  const line = h.log.records().find((r) => r.msg === 'request')!
  t.equal(line.status, 502, 'the access line says the upstream failed, not 499')
  t.ok(h.log.records().some((r) => r.level === 40 && r.upstreamError !== undefined && r.requestId === line.requestId), 'a warning names the upstream\'s error')
  t.equal(await metric(h.adminUrl, 'auth_sidecar_upstream_errors_total{reason="reset",route="default"}'), 1)
  t.same(stackIn(h.log.lines), [], 'no stack trace')
})

t.test('a client that stops in the middle of an upload: its own 499, not counted or logged as an upstream failure', async (t) => {
  const h = await build(t)
  await until(() => h.app.credential.ready())
  const req = httpRequest(`${h.proxyUrl}/_echo`, { method: 'POST', agent: false, headers: { 'content-length': String(1_000_000) } })
  req.on('error', () => {})
  req.write(Buffer.alloc(100_000, 1))
  await until(() => h.upstream.received.length === 1)
  req.destroy()
  await until(() => h.log.records().some((r) => r.msg === 'request'))
  await new Promise((resolve) => setTimeout(resolve, 200))
  t.same(h.log.records().filter((r) => r.msg === 'request').map((r) => r.status), [499], 'one access line, the client\'s 499')
  t.same(h.log.records().filter((r) => (r.level as number) >= 40).map((r) => r.msg), [], 'no warning: nothing failed on the upstream side')
  t.equal(await metric(h.adminUrl, 'auth_sidecar_upstream_errors_total{reason="reset",route="default"}'), 0)
  t.same(stackIn(h.log.lines), [], 'no stack trace')
})

t.test('interim answers do not extend UPSTREAM_TIMEOUT_MS: 103s every half second and never a final status give 504 in time', async (t) => {
  const up = await rawUpstream(t, (_head, socket) => {
    const timer = setInterval(() => { if (!socket.destroyed) socket.write('HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\n\r\n') }, 500)
    socket.on('close', () => clearInterval(timer))
  })
  const h = await build(t, { BASE_URL: up.url, UPSTREAM_TIMEOUT_MS: '1200' })
  await until(() => h.app.credential.ready())
  const started = Date.now()
  const res = await send(`${h.proxyUrl}/hints`)
  t.equal(res.status, 504)
  t.ok(Date.now() - started < 2_500, `answered after ${Date.now() - started} ms against a timeout of 1200`)
  t.equal(await metric(h.adminUrl, 'auth_sidecar_upstream_errors_total{reason="timeout",route="default"}'), 1)
})

t.test('an endless stream of 102s is cut after a few: 502 at once, the CPU spared', async (t) => {
  const up = await rawUpstream(t, (_head, socket) => {
    const flood = (): void => {
      while (!socket.destroyed && socket.write('HTTP/1.1 102 Processing\r\n\r\n')) {}
      if (!socket.destroyed) socket.once('drain', flood)
    }
    flood()
  })
  const h = await build(t, { BASE_URL: up.url, UPSTREAM_TIMEOUT_MS: '10000' })
  await until(() => h.app.credential.ready())
  const cpu = process.cpuUsage()
  const started = Date.now()
  const res = await send(`${h.proxyUrl}/processing`)
  t.equal(res.status, 502)
  // not held until UPSTREAM_TIMEOUT_MS, nor spinning through it: half of it, on a busy machine
  t.ok(Date.now() - started < 5_000, `answered after ${Date.now() - started} ms`)
  const used = process.cpuUsage(cpu)
  t.ok((used.user + used.system) / 1000 < 5_000, `${Math.round((used.user + used.system) / 1000)} ms of CPU`)
  t.ok(h.log.records().some((r) => r.upstreamError === 'AUTH_SIDECAR_INTERIM_FLOOD'), 'the log says why')
  t.equal((await send(`${h.proxyUrl}/fine`)).status, 502, 'that upstream still floods: the next one too, no hang')
})
