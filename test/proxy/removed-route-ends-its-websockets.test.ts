import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import WebSocket, { WebSocketServer } from 'ws'
import { loadConfig } from '../../src/config/load.js'
import { build, harnessEnv, scrapeUntil, until } from '../helpers/build.js'

/** An upstream that echoes each message with the path its session was opened on, records how each session ended, and answers no HTTP request (counted). */
async function echoUpstream (t: Test): Promise<{ url: string, ended: Array<{ path: string, code: number }>, requests: string[] }> {
  const ended: Array<{ path: string, code: number }> = []
  const requests: string[] = []
  const server = createServer((req) => { requests.push(req.url ?? '') })
  const wss = new WebSocketServer({ server })
  wss.on('connection', (socket, req) => {
    socket.on('message', (data) => socket.send(`${req.url ?? ''}:${String(data)}`))
    socket.on('close', (code) => ended.push({ path: req.url ?? '', code }))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    for (const c of wss.clients) c.terminate()
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, ended, requests }
}

interface Session { ws: WebSocket, closed: Promise<{ code: number, reason: string }> }

async function open (url: string): Promise<Session> {
  const ws = new WebSocket(url)
  const closed = new Promise<{ code: number, reason: string }>((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: String(reason) })))
  await new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject) })
  return { ws, closed }
}

async function echo (s: Session, text: string): Promise<string> {
  const answer = new Promise<string>((resolve) => s.ws.once('message', (d) => resolve(String(d))))
  s.ws.send(text)
  return await answer
}

t.test('a route removed by a new configuration ends its WebSocket sessions with 1001, those of its earlier versions too; a changed route\'s and the other routes\' go on', async (t) => {
  const up = await echoUpstream(t)
  const chat = (version: string): Record<string, string> => ({ ROUTE_CHAT_BASE_URL: `${up.url}/chat-${version}`, ROUTE_CHAT_PATH: '/chat' })
  const h = await build(t, { BASE_URL: `${up.url}/api`, ...chat('v1') })
  await until(() => h.app.credential.ready())
  const ws = h.proxyUrl.replace('http', 'ws')
  const first = await open(`${ws}/chat/room`)
  const other = await open(`${ws}/stream`)
  t.equal(await echo(first, 'a'), '/chat-v1/room:a')

  const changed = loadConfig({ ...harnessEnv(h), BASE_URL: `${up.url}/api`, ...chat('v2') }, { cwd: '/nonexistent' })
  t.match(await h.app.apply(changed), { changed: ['chat'], removed: [] })
  const second = await open(`${ws}/chat/room`)
  t.equal(await echo(second, 'b'), '/chat-v2/room:b', 'a new session goes to the changed route')
  t.equal(await echo(first, 'c'), '/chat-v1/room:c', 'one opened before the change goes on where it was opened')

  // an HTTP request in flight on the route (this upstream answers none) holds its retirement, not its sessions' end
  const pending = new AbortController()
  const inFlight = fetch(`${h.proxyUrl}/chat/never-answered`, { signal: pending.signal }).catch(() => 'aborted')
  await until(() => up.requests.includes('/chat-v2/never-answered'))
  const without = loadConfig({ ...harnessEnv(h), BASE_URL: `${up.url}/api` }, { cwd: '/nonexistent' })
  t.match(await h.app.apply(without), { removed: ['chat'] })
  t.same(await first.closed, { code: 1001, reason: 'route removed' }, 'the session from before the change is ended')
  t.same(await second.closed, { code: 1001, reason: 'route removed' }, 'and the one from after it, with a request still in flight')
  await until(() => up.ended.length === 2)
  t.same(up.ended.map((e) => e.code), [1001, 1001], 'the upstream hears it too')
  t.equal(await echo(other, 'd'), '/api/stream:d', 'the default route\'s session goes on')

  // the request done, the route retires: its sessions' access lines, written as their connections closed, bring no series back
  pending.abort()
  t.equal(await inFlight, 'aborted')
  await until(() => h.log.lines.filter((l) => l.includes('"route":"chat"') && l.includes('"status":101')).length === 2)
  t.notMatch(await scrapeUntil(h.adminUrl, (text) => !text.includes('route="chat"')), 'route="chat"', 'no series of the removed route is left')
  other.ws.close()
})
