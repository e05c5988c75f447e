/**
 * dist/main.js: loads the sidecar (dist/sidecar.cjs, the bundle of
 * src/main.ts and every dependency) with V8's code cache for it, made by the
 * build (scripts/code-cache.mjs) for this bundle, this Node and these V8
 * options.
 *
 * Compiling the 2 MB bundle, and then each function the first time it runs,
 * was about a fifth of start-up: with the cache V8 reads back the bytecode
 * of every function a start and a first request ran (docs/performance.md,
 * "Start-up: V8's code cache"). This is Node's documented `vm.Script`
 * `cachedData`. Node 22's module compile cache (`NODE_COMPILE_CACHE`) is
 * V8's code cache too, but made as a module is compiled, so it holds little
 * beyond the top-level code (it gained nothing measurable); Node 20 has none,
 * and neither could write in a read-only image.
 *
 * - The cache's file is named after a hash of the bundle's bytes, Node's
 *   version, the architecture and node's options (process.execArgv), so a
 *   rebuilt bundle or another Node never picks up a stale one. V8 checks
 *   its own version and options again and refuses a cache that does not
 *   match (the bundle is then compiled from source, as without a cache).
 * - Missing, refused or unreadable: the sidecar starts all the same, only
 *   slower. With LOG_LEVEL=debug the sidecar logs which it was.
 * - Nothing is written at run time. `--write-code-cache` (the build's, not
 *   a user's flag; removed from the arguments before the sidecar sees them)
 *   writes the cache when the process exits.
 */
import { createHash } from 'node:crypto'
import { isAscii } from 'node:buffer'
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Script } from 'node:vm'
import { CODE_CACHE_OUTCOME, type CodeCacheOutcome } from './code-cache.js'

const WRITE_FLAG = '--write-code-cache'

/** Compiles and runs the bundle; nothing of it (2 MB of source, 2 MB of cache) stays referenced here. */
function load (file: string, writing: boolean): void {
  const bytes = readFileSync(file)
  // An identity, not a security check: whoever can write the cache can
  // write the bundle beside it.
  const key = createHash('sha1').update(bytes).update(`\0${process.version}\0${process.arch}\0${process.execArgv.join('\0')}`).digest('hex')
  const cacheFile = join(dirname(file), 'code-cache', `${key}.bin`)

  let cachedData: Buffer | undefined
  if (!writing) {
    try {
      cachedData = readFileSync(cacheFile)
    } catch {}
  }

  // The build keeps the bundle ASCII: read as Latin-1 it is a one-byte
  // string, half the memory of the two-byte one a single other character
  // makes, and decoding 2 MB as UTF-8 took 10 ms more. A cache is written
  // only for an ASCII bundle (below), so with one the 3 ms check is skipped.
  const ascii = cachedData !== undefined || isAscii(bytes)
  const source = bytes.toString(ascii ? 'latin1' : 'utf8')

  // CommonJS's own wrapper, on a line of its own (lineOffset keeps the
  // bundle's line numbers in stack traces).
  const script = new Script(`(function (exports, require, module, __filename, __dirname) {\n${source}\n})`, {
    filename: file,
    lineOffset: -1,
    ...(cachedData !== undefined && { cachedData })
  })
  const outcome: CodeCacheOutcome = writing ? 'writing' : cachedData === undefined ? 'absent' : script.cachedDataRejected === true ? 'rejected' : 'accepted'
  ;(globalThis as { [CODE_CACHE_OUTCOME]?: CodeCacheOutcome })[CODE_CACHE_OUTCOME] = outcome

  if (writing && !ascii) {
    process.stderr.write('auth-sidecar: code cache not written: the bundle is not ASCII\n')
    process.exitCode = 1
  } else if (writing) {
    // At exit V8 has the bytecode of everything the start and the build's
    // requests ran; all of it goes into the cache.
    process.on('exit', () => {
      try {
        mkdirSync(dirname(cacheFile), { recursive: true })
        writeFileSync(`${cacheFile}.tmp`, script.createCachedData())
        renameSync(`${cacheFile}.tmp`, cacheFile)
      } catch (err) {
        process.stderr.write(`auth-sidecar: code cache not written: ${(err as Error).message}\n`)
        process.exitCode = 1
      }
    })
  }

  const module = { exports: {} }
  ;(script.runInThisContext() as (...args: unknown[]) => void).call(module.exports, module.exports, createRequire(file), module, file, dirname(file))
}

const writing = process.argv.includes(WRITE_FLAG)
if (writing) process.argv = process.argv.filter((a) => a !== WRITE_FLAG)
load(fileURLToPath(new URL('./sidecar.cjs', import.meta.url)), writing)
