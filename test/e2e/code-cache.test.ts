import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync, appendFileSync } from 'node:fs'
import { isAscii } from 'node:buffer'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { send } from '../helpers/build.js'
import { root, startSidecar, type Launch } from '../helpers/process.js'

// src/loader.ts: dist/main.js compiles dist/sidecar.cjs with the V8 code
// cache the build made for this Node and these node options
// (scripts/code-cache.mjs), and starts without one when it is missing, stale
// or refused. With LOG_LEVEL=debug the sidecar says which.
// Untracked: tap's hooks in NODE_OPTIONS are not node options V8 ignores.

const cacheDir = `${root}dist/code-cache`

function outcomeOf (stdout: string[]): string {
  const line = stdout.find((l) => l.includes('"msg":"code cache"'))
  if (line === undefined) throw new Error(`no code cache line in: ${stdout.join('\n')}`)
  return (JSON.parse(line) as { codeCache: string }).codeCache
}

/** A copy of dist/ (the product's files only) and package.json, to break. */
function copyOfDist (t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'code-cache-'))
  t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
  for (const f of ['main.js', 'sidecar.cjs', 'package.json']) cpSync(`${root}dist/${f}`, join(dir, 'dist', f))
  cpSync(cacheDir, join(dir, 'dist', 'code-cache'), { recursive: true })
  cpSync(`${root}package.json`, join(dir, 'package.json'))
  return join(dir, 'dist')
}

/** Starts the sidecar, proxies a request, says what the loader did with the cache. */
async function startAndProxy (t: Test, launch: Launch): Promise<string> {
  const { run, proxyUrl } = await startSidecar(t, { LOG_LEVEL: 'debug' }, {}, true, { untracked: true, ...launch })
  t.equal((await send(`${proxyUrl}/anything`)).status, 200, 'proxies')
  return outcomeOf(run.stdout)
}

t.test('the build made a cache for plain node, the image\'s options for this Node and npm start\'s', async (t) => {
  const { nodeFlagsFor, IMAGE_NODE_FLAGS } = await import(`${root}scripts/image-options.mjs`) as { nodeFlagsFor: () => string, IMAGE_NODE_FLAGS: string }
  const files = readdirSync(cacheDir)
  t.equal(files.length, new Set(['', nodeFlagsFor(), IMAGE_NODE_FLAGS]).size, files.join(', '))
  for (const f of files) t.match(f, /^[0-9a-f]{40}\.bin$/)
})

t.test('the bundle is ASCII, so that it loads as a one-byte string', async (t) => {
  t.ok(isAscii(readFileSync(`${root}dist/sidecar.cjs`)))
})

t.test('the bundle and the loader are strict mode code, as the ES modules they are built from', async (t) => {
  for (const f of ['sidecar.cjs', 'main.js']) {
    const text = readFileSync(`${root}dist/${f}`, 'latin1')
    t.ok(text.startsWith("'use strict';"), `${f} begins with the directive`)
  }
  // and it takes: in sloppy mode this assignment would be ignored silently
  const { Script } = await import('node:vm')
  const source = readFileSync(`${root}dist/sidecar.cjs`, 'latin1')
  const probe = new Script(`(function () {\n${source.slice(0, 13)}\nObject.freeze({}).x = 1\n})`).runInThisContext() as () => void
  t.throws(probe, TypeError)
})

t.test('plain `node dist/main.js`: V8 takes the cache', async (t) => {
  t.equal(await startAndProxy(t, {}), 'accepted')
})

t.test('with the image\'s options for this Node: V8 takes that cache', async (t) => {
  const { nodeFlagsFor } = await import(`${root}scripts/image-options.mjs`) as { nodeFlagsFor: () => string }
  t.equal(await startAndProxy(t, { nodeArgs: nodeFlagsFor().split(' ') }), 'accepted')
})

t.test('npm start\'s options (the image\'s as written): V8 takes that cache', async (t) => {
  const { IMAGE_NODE_FLAGS } = await import(`${root}scripts/image-options.mjs`) as { IMAGE_NODE_FLAGS: string }
  t.equal(await startAndProxy(t, { nodeArgs: IMAGE_NODE_FLAGS.split(' ') }), 'accepted')
})

t.test('other node options: no cache of theirs, and the sidecar starts without one', async (t) => {
  t.equal(await startAndProxy(t, { nodeArgs: ['--max-old-space-size=256'] }), 'absent')
})

t.test('a bundle changed after the build: its old cache is not used', async (t) => {
  const dist = copyOfDist(t)
  appendFileSync(join(dist, 'sidecar.cjs'), '\n// changed\n')
  t.equal(await startAndProxy(t, { entry: join(dist, 'main.js') }), 'absent')
})

t.test('a damaged cache: V8 refuses it and the sidecar starts from source', async (t) => {
  const dist = copyOfDist(t)
  for (const f of readdirSync(join(dist, 'code-cache'))) {
    const p = join(dist, 'code-cache', f)
    const bytes = readFileSync(p)
    writeFileSync(p, bytes.subarray(0, bytes.length >> 1))
  }
  t.equal(await startAndProxy(t, { entry: join(dist, 'main.js') }), 'rejected')
})

t.test('nothing is written at run time: the cache files are as the build left them', async (t) => {
  const before = readdirSync(cacheDir).map((f) => `${f} ${statSync(join(cacheDir, f)).mtimeMs}`)
  const { run } = await startSidecar(t, {}, {}, true, { untracked: true })
  run.child.kill('SIGTERM')
  t.equal(await run.exited, 0)
  t.same(readdirSync(cacheDir).map((f) => `${f} ${statSync(join(cacheDir, f)).mtimeMs}`), before)
})
