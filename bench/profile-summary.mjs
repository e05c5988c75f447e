// Summarises a V8 .cpuprofile (from `node --cpu-prof`): self time by package
// (node_modules/<name>, node: internals, or our dist/), and the top functions.
// Usage: node bench/profile-summary.mjs file.cpuprofile [topN]
import { readFileSync } from 'node:fs'

const [file, topArg] = process.argv.slice(2)
const profile = JSON.parse(readFileSync(file, 'utf8'))
const top = Number(topArg ?? 25)
const byId = new Map(profile.nodes.map((n) => [n.id, n]))
const self = new Map()
const dt = profile.timeDeltas
for (let i = 0; i < profile.samples.length; i++) self.set(profile.samples[i], (self.get(profile.samples[i]) ?? 0) + (dt[i] ?? 0))

const where = (url) => {
  if (url === '') return '(native/gc/idle)'
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)
  if (m) return m[1]
  if (url.startsWith('node:')) return 'node: ' + url.slice(5).split('/')[0]
  if (url.includes('/dist/')) return 'auth-sidecar (dist)'
  return url
}
const byPackage = new Map()
const byFunction = new Map()
let total = 0
for (const [id, us] of self) {
  const n = byId.get(id)
  const fn = n.callFrame.functionName || '(anonymous)'
  if (fn === '(idle)' || fn === '(program)') continue
  total += us
  const pkg = where(n.callFrame.url)
  byPackage.set(pkg, (byPackage.get(pkg) ?? 0) + us)
  const key = `${fn} ${pkg}`
  byFunction.set(key, (byFunction.get(key) ?? 0) + us)
}
const pct = (us) => (100 * us / total).toFixed(1).padStart(5) + '%'
console.log(`busy time: ${(total / 1000).toFixed(0)} ms\n\nby package:`)
for (const [k, v] of [...byPackage].sort((a, b) => b[1] - a[1]).slice(0, 20)) console.log(`${pct(v)}  ${k}`)
console.log('\ntop functions (self time):')
for (const [k, v] of [...byFunction].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${pct(v)}  ${k}`)
