// Builds dist/ from src/ with esbuild. dist/main.js is the sidecar with its
// dependencies bundled in: the image then needs no node_modules, only that
// one file. dist/dev/ holds the demo and the development token server, which
// are never shipped. `--if-possible` (used by `prepare`) skips quietly when
// esbuild is not installed, as in a production install with `--omit=dev`.
import { existsSync, readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'

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

rmSync('dist', { recursive: true, force: true })
const common = {
  bundle: true,
  platform: 'node',
  target: 'node20.18',
  format: 'esm',
  outdir: 'dist',
  sourcemap: true,
  legalComments: 'linked',
  // Without comments and indentation the bundle is a third smaller and pure
  // ASCII (esbuild escapes the rest), so V8 holds its source as one byte per
  // character: a single curly quote in a bundled comment made it two. Names
  // are kept; main.js.map maps a stack trace's positions back to src/.
  minifyWhitespace: true,
  logLevel: 'warning',
  // The CommonJS dependencies call require(): an ES module has none of its own.
  banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" }
}
// The OpenTelemetry packages without an `exports` map are bundled from their
// ES module builds (`module`), as those with one already are: their CommonJS
// builds would put every use of an export on a traced request behind an
// interop getter. A package with an `exports` map or no `module` is left to
// esbuild. `sideEffects` is passed on, as esbuild does not read it for a path
// a plugin resolved.
const openTelemetryModules = {
  name: 'opentelemetry-modules',
  setup (build) {
    build.onResolve({ filter: /^@opentelemetry\/[^/]+$/ }, ({ path, resolveDir }) => {
      let manifestPath
      try {
        manifestPath = createRequire(join(resolveDir, 'index.js')).resolve(`${path}/package.json`)
      } catch {
        return undefined
      }
      const manifest = JSON.parse(readFileSync(manifestPath, 'utf8'))
      if (typeof manifest.module !== 'string' || manifest.exports !== undefined) return undefined
      return { path: join(dirname(manifestPath), manifest.module), sideEffects: manifest.sideEffects === false ? false : undefined }
    })
  }
}

// What is imported only when a setting turns it on (the forward proxy and its
// certificate library, the OpenTelemetry SDK) goes to dist/chunks/, read only
// then: held in main.js it cost every sidecar its source in memory, some MB.
await esbuild.build({ ...common, entryPoints: { main: 'src/main.ts' }, splitting: true, chunkNames: 'chunks/[name]-[hash]', plugins: [openTelemetryModules] })
await esbuild.build({ ...common, entryPoints: { 'dev/demo': 'dev/demo.ts', 'dev/token-server': 'dev/token-server-main.ts' } })
