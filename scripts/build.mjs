// Builds dist/ from src/ with esbuild: one file per entry point, the
// dependencies bundled in. Loading one file instead of a few hundred took
// start-up to the first proxied 200 from about 290 to 200 ms (see
// docs/performance.md). `--if-possible` (used by `prepare`) skips quietly when
// esbuild is not installed, as in a production install with `--omit=dev`.
import { isAscii } from 'node:buffer'
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'

const ifPossible = process.argv.includes('--if-possible')
let esbuild
try {
  esbuild = await import('esbuild')
} catch (err) {
  if (ifPossible) {
    console.log('build skipped: esbuild is not installed (production install)')
    process.exit(0)
  }
  throw err
}

if (!existsSync('src/main.ts')) {
  if (ifPossible) process.exit(0)
  throw new Error('src/main.ts not found: run the build from the repository root')
}

const common = {
  bundle: true,
  platform: 'node',
  target: 'node20.18',
  outdir: 'dist',
  sourcemap: true,
  // Whitespace only: V8 keeps the whole source of a script in memory (3.2 MB
  // as written, 2.1 MB without the whitespace: 4 MB less idle RSS) and
  // scans all of it at start-up. Renaming and rewriting (full minification)
  // made evaluation slower (docs/performance.md), and names stay readable
  // in stack traces.
  minifyWhitespace: true,
  logLevel: 'warning'
}

// dist/ is a CommonJS package scope (dist/package.json): Node starts a
// CommonJS entry point without its ES module loader, 10 ms sooner on Node 20
// with the image's options (docs/performance.md, "Start-up: V8's code
// cache"). The development entry points stay ES modules, as .mjs.
// (from nothing: no file of an earlier build's layout left behind)
rmSync('dist', { recursive: true, force: true })
mkdirSync('dist')
writeFileSync('dist/package.json', JSON.stringify({ type: 'commonjs' }) + '\n')

// import.meta.url (src/version.ts, src/loader.ts) in a CommonJS script.
// PITFALLS: the banner goes before esbuild's own "use strict", which is then
// no longer a directive: the whole bundle ran in sloppy mode (ES modules are
// strict). The banner begins with the directive itself.
const commonJs = {
  format: 'cjs',
  define: { 'import.meta.url': '__import_meta_url' },
  banner: { js: "'use strict'; var __import_meta_url = require('node:url').pathToFileURL(__filename).href;" }
}

// The sidecar: src/main.ts and its dependencies as one script, which
// dist/main.js (src/loader.ts) compiles with V8's code cache; Node 20 has no
// code cache for ES modules.
await esbuild.build({
  ...common,
  ...commonJs,
  entryPoints: { sidecar: 'src/main.ts' },
  outExtension: { '.js': '.cjs' },
  // esbuild escapes every other non-ASCII character, but keeps licence
  // comments as written; in a file of their own the bundle stays ASCII,
  // which src/loader.ts reads as a one-byte string (half the memory).
  legalComments: 'external'
})

const bundle = readFileSync('dist/sidecar.cjs')
if (!isAscii(bundle)) throw new Error('dist/sidecar.cjs is not ASCII: see legalComments above')
if (!bundle.subarray(0, 13).equals(Buffer.from("'use strict';"))) throw new Error('dist/sidecar.cjs does not begin with the "use strict" directive')

await esbuild.build({ ...common, ...commonJs, entryPoints: { main: 'src/loader.ts' } })

await esbuild.build({
  ...common,
  entryPoints: { demo: 'src/demo.ts', 'dev-token-server': 'src/dev/token-server-main.ts' },
  format: 'esm',
  outExtension: { '.js': '.mjs' },
  // CommonJS dependencies call require(): give the ES module bundle one.
  banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" }
})

if (!process.argv.includes('--no-code-cache')) {
  // Without a cache the sidecar starts all the same, only slower: say so
  // and go on (a build where loopback is closed, say).
  try {
    const { writeCodeCaches } = await import('./code-cache.mjs')
    const written = await writeCodeCaches()
    console.log(`code cache: dist/code-cache/ (${written.length} for node ${process.version})`)
  } catch (err) {
    console.warn(`code cache not written, the sidecar will start slower: ${err.message}`)
  }
}
