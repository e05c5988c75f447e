// Builds dist/ from src/ with esbuild: one file per entry point, the
// dependencies bundled in. Loading one file instead of a few hundred took
// start-up to the first proxied 200 from about 290 to 200 ms (see
// docs/performance.md). `--if-possible` (used by `prepare`) skips quietly when
// esbuild is not installed, as in a production install with `--omit=dev`.
import { existsSync } from 'node:fs'

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

await esbuild.build({
  entryPoints: { main: 'src/main.ts', demo: 'src/demo.ts', 'dev-token-server': 'src/dev/token-server-main.ts' },
  outdir: 'dist',
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20.18',
  sourcemap: true,
  // Whitespace only: V8 keeps the whole source of a script in memory (3.2 MB
  // as written, 2.1 MB without the whitespace: 4 MB less idle RSS) and
  // scans all of it at start-up. Renaming and rewriting (full minification)
  // made evaluation slower (docs/performance.md), and names stay readable
  // in stack traces.
  minifyWhitespace: true,
  // CommonJS dependencies call require(): give the ES module bundle one.
  banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
  logLevel: 'warning'
})
