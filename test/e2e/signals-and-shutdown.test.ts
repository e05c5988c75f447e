import { request as httpRequest } from 'node:http'
import { connect } from 'node:net'
import t from 'tap'
import { send, until } from '../helpers/build.js'
import { startSidecar } from '../helpers/process.js'

t.test('SIGINT shuts down like SIGTERM: exit 0, the session ended', async (t) => {
  const s = await startSidecar(t)
  s.run.child.kill('SIGINT')
  t.equal(await s.run.exited, 0)
  t.equal(s.tokenServer.logouts.length, 1, 'the session ended')
  t.ok(s.run.stdout.some((l) => l.includes('"signal":"SIGINT"')))
})

t.test('SIGUSR1 opens no debugger: nothing listens on 9229, the proxy serves on', async (t) => {
  const s = await startSidecar(t)
  s.run.child.kill('SIGUSR1')
  await until(() => s.run.stdout.some((l) => l.includes('SIGUSR1 ignored')))
  const inspector = await new Promise<string>((resolve) => {
    const socket = connect(9229, '127.0.0.1')
    socket.once('connect', () => { socket.destroy(); resolve('listening') })
    socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'))
  })
  t.equal(inspector, 'ECONNREFUSED', 'no inspector on 127.0.0.1:9229')
  t.notMatch(s.run.stderr.join(''), /Debugger listening/)
  t.equal((await send(`${s.proxyUrl}/x`)).status, 200)
})

t.test('requests outliving SHUTDOWN_GRACE_MS are cut at its end, their upstream requests aborted; the session is still ended and the exit is 0, promptly', async (t) => {
  const s = await startSidecar(t, { SHUTDOWN_GRACE_MS: '1000' })
  const cut = new Promise<string>((resolve) => {
    const req = httpRequest(`${s.proxyUrl}/_slow/20000`, { agent: false }, (res) => { res.resume(); res.on('end', () => resolve(`answered ${res.statusCode}`)) })
    req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'))
    req.end()
  })
  await until(() => s.upstream.inFlight === 1)
  const signalled = Date.now()
  s.run.child.kill('SIGTERM')
  t.equal(await cut, 'ECONNRESET', 'the client\'s connection is cut')
  const code = await s.run.exited
  const took = Date.now() - signalled
  t.equal(code, 0)
  t.ok(took < 2_500, `exited ${took} ms after SIGTERM, with a grace period of 1000 ms`)
  t.equal(s.upstream.inFlight, 0, 'the upstream request was aborted')
  t.equal(s.tokenServer.logouts.length, 1, 'the session was still ended')
})

t.test('a request whose client has left does not hold up the exit', async (t) => {
  const s = await startSidecar(t, { SHUTDOWN_GRACE_MS: '3000' })
  const req = httpRequest(`${s.proxyUrl}/_slow/20000`, { agent: false })
  req.on('error', () => {})
  req.end()
  await until(() => s.upstream.inFlight === 1)
  req.destroy()
  await until(() => s.upstream.inFlight === 0, 2_000).catch(() => {})
  t.equal(s.upstream.inFlight, 0, 'the upstream request is aborted when its client leaves')
  const signalled = Date.now()
  s.run.child.kill('SIGTERM')
  t.equal(await s.run.exited, 0)
  t.ok(Date.now() - signalled < 1_500, `exited ${Date.now() - signalled} ms after SIGTERM: nothing was left in progress`)
})
