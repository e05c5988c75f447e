// Makes V8's code cache for dist/sidecar.cjs (src/loader.ts reads it): runs
// the built sidecar once with `--write-code-cache`, in front of a loopback
// upstream and the development token server, sends it the requests of a
// start (a proxied one, the admin endpoints) and stops it with SIGTERM; at
// exit it writes the bytecode V8 compiled for all of that into
// dist/code-cache/. Once with no node options, once with the image's options
// for this Node and once with them as the image and npm start write them
// (scripts/image-options.mjs; the last two are one on Node 22 and later): a
// cache serves only the Node and the options it was made with. Nothing
// leaves 127.0.0.1.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { readdirSync, rmSync } from 'node:fs'
import { createServer } from 'node:http'
import { join } from 'node:path'
import { IMAGE_GLIBC_TUNABLES, IMAGE_NODE_FLAGS, nodeFlagsFor } from './image-options.mjs'

const TIMEOUT_MS = 30_000

/** Resolves with the first line of `stream` that parses as JSON and satisfies `test`. */
function jsonLine (stream, test) {
  return new Promise((resolve, reject) => {
    let buf = ''
    const onData = (chunk) => {
      buf += chunk
      let i
      while ((i = buf.indexOf('\n')) !== -1) {
        const line = buf.slice(0, i)
        buf = buf.slice(i + 1)
        let value
        try { value = JSON.parse(line) } catch { continue }
        if (test(value)) {
          stream.off('data', onData)
          stream.resume()
          resolve(value)
          return
        }
      }
    }
    stream.on('data', onData)
    stream.once('end', () => reject(new Error('the process ended before it said it was ready')))
  })
}

async function get (url) {
  const res = await fetch(url)
  await res.arrayBuffer()
  return res.status
}

async function freePort () {
  const s = createServer().listen(0, '127.0.0.1')
  await once(s, 'listening')
  const { port } = s.address()
  s.close()
  return port
}

/** Writes dist/code-cache/: one cache per set of node options. */
export async function writeCodeCaches (root = process.cwd()) {
  const dist = join(root, 'dist')
  // none; the image's for this Node (the bench's); the image's as written
  // (npm start's, which on Node 20 adds an option the image leaves out there)
  const flagSets = new Set(['', nodeFlagsFor(), IMAGE_NODE_FLAGS])
  rmSync(join(dist, 'code-cache'), { recursive: true, force: true })
  const upstream = createServer((req, res) => { req.resume(); res.end('ok') }).listen(0, '127.0.0.1')
  await once(upstream, 'listening')
  const tokenServer = spawn(process.execPath, [join(dist, 'dev-token-server.mjs')], { env: { PATH: process.env.PATH, TOKEN_SECONDS: '300' }, stdio: ['ignore', 'pipe', 'inherit'] })
  const timer = setTimeout(() => { tokenServer.kill('SIGKILL') }, TIMEOUT_MS)
  try {
    const { url } = await jsonLine(tokenServer.stdout, (v) => typeof v.url === 'string')
    for (const flags of flagSets) {
      const [proxyPort, adminPort] = [await freePort(), await freePort()]
      const sidecar = spawn(process.execPath, [...flags.split(' ').filter(Boolean), join(dist, 'main.js'), '--write-code-cache'], {
        cwd: root,
        env: {
          PATH: process.env.PATH,
          ...(flags !== '' && { GLIBC_TUNABLES: IMAGE_GLIBC_TUNABLES }),
          BASE_URL: `http://127.0.0.1:${upstream.address().port}`,
          AUTH_URL: url,
          AUTH_CLIENT_ID: 'legacy-app',
          AUTH_USERNAME: 'service-user',
          AUTH_PASSWORD: 'service-password',
          PROXY_PORT: String(proxyPort),
          ADMIN_PORT: String(adminPort)
        },
        stdio: ['ignore', 'pipe', 'inherit']
      })
      const killer = setTimeout(() => { sidecar.kill('SIGKILL') }, TIMEOUT_MS)
      const exited = once(sidecar, 'exit')
      await jsonLine(sidecar.stdout, (v) => v.msg === 'auth-sidecar listening')
      for (const u of [`http://127.0.0.1:${proxyPort}/`, `http://127.0.0.1:${adminPort}/readyz`, `http://127.0.0.1:${adminPort}/healthz`, `http://127.0.0.1:${adminPort}/metrics`]) {
        const status = await get(u)
        if (status !== 200) throw new Error(`code cache: ${u} answered ${status}`)
      }
      sidecar.kill('SIGTERM')
      const [code] = await exited
      clearTimeout(killer)
      if (code !== 0) throw new Error(`code cache: the sidecar exited with ${code}`)
    }
  } finally {
    clearTimeout(timer)
    tokenServer.kill('SIGTERM')
    upstream.close()
  }
  const written = readdirSync(join(dist, 'code-cache'))
  if (written.length !== flagSets.size) throw new Error(`code cache: ${written.length} written, ${flagSets.size} expected`)
  return written
}
