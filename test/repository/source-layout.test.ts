import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { build } from 'esbuild'
import t from 'tap'
import { root } from '../helpers/process.js'

function sourceFiles (dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [])
}
const files = sourceFiles(`${root}src`)

t.test('no import cycles between the modules of src/', async (t) => {
  const { metafile } = await build({ entryPoints: [`${root}src/main.ts`], bundle: true, platform: 'node', format: 'esm', packages: 'external', write: false, metafile: true, logLevel: 'silent' })
  const edges = new Map<string, string[]>()
  for (const [file, input] of Object.entries(metafile.inputs)) {
    edges.set(file, input.imports.filter((i) => i.path.startsWith('src/')).map((i) => i.path))
  }
  const cycles: string[] = []
  const state = new Map<string, 'open' | 'done'>()
  const visit = (file: string, path: string[]): void => {
    if (state.get(file) === 'done') return
    if (state.get(file) === 'open') {
      cycles.push([...path.slice(path.indexOf(file)), file].join(' -> '))
      return
    }
    state.set(file, 'open')
    for (const next of edges.get(file) ?? []) visit(next, [...path, file])
    state.set(file, 'done')
  }
  for (const file of edges.keys()) visit(file, [])
  t.same(cycles, [])
  t.ok(edges.size > 20, `${edges.size} modules read`)
})

t.test('config/ depends on no other folder, tls/ on config/ only, token/ not on proxy/; the proxy knows credentials by their contract only; only main.ts hands over the environment', async (t) => {
  for (const file of files) {
    const rel = relative(`${root}src`, file)
    const text = readFileSync(file, 'utf8')
    const imports = [...text.matchAll(/from '(\.[^']+)'/g)].map((m) => join(rel, '..', m[1]!))
    if (rel.startsWith('config/')) t.same(imports.filter((i) => !i.startsWith('config/')), [], rel)
    if (rel !== 'main.ts') t.notMatch(text, /process\.env/, `${rel} reads no environment: the configuration is read in one place`)
    if (rel.startsWith('token/')) t.same(imports.filter((i) => /^(proxy|admin)\//.test(i)), [], rel)
    if (rel.startsWith('proxy/')) t.same(imports.filter((i) => /^token\//.test(i) && i !== 'token/credential.js'), [], rel)
    if (rel.startsWith('tls/')) t.same(imports.filter((i) => /^(token|proxy|admin)\//.test(i)), [], rel)
  }
})

t.test('no private Node internals', async (t) => {
  for (const file of files) {
    t.notMatch(readFileSync(file, 'utf8'), /\b_handle\b|\b_paused\b|process\.binding|internalBinding/, relative(root, file))
  }
})
