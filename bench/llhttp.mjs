// How much undici's HTTP/1.1 parser (llhttp, WebAssembly) costs per response
// on each of V8's WebAssembly tiers: TurboFan (V8's default once the parser
// is hot) and Liftoff (what the sidecar keeps, src/heap.ts keepWasmOnLiftoff).
// Each tier runs in its own process, alternately, LLHTTP_RUNS times (5); the
// parser is warmed up first so that the default tier-up has happened.
// Usage: node bench/llhttp.mjs
import { execFileSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const RUNS = Number(process.env.LLHTTP_RUNS ?? 5)
const PARSES = 300_000

if (process.argv[2] === 'child') {
  const { createRequire } = await import('node:module')
  const require = createRequire(import.meta.url)
  const constants = require('undici/lib/llhttp/constants.js')
  const mod = new WebAssembly.Module(require('undici/lib/llhttp/llhttp_simd-wasm.js'))
  const callback = () => 0
  const { exports: llhttp } = new WebAssembly.Instance(mod, { env: new Proxy({}, { get: () => callback }) })
  // a typical API answer: a dozen headers and a short JSON body
  const response = Buffer.from([
    'HTTP/1.1 200 OK', 'content-type: application/json; charset=utf-8', 'content-length: 27',
    'date: Sun, 22 Nov 2026 08:00:00 GMT', 'connection: keep-alive', 'keep-alive: timeout=5',
    'x-request-id: 0123456789abcdef0123456789abcdef', 'etag: W/"1b-abcdefabcdefabcdef"',
    'cache-control: no-store', 'vary: accept-encoding', '', '{"ok":true,"path":"/x/y/z"}'
  ].join('\r\n'))
  const parser = llhttp.llhttp_alloc(constants.TYPE.RESPONSE)
  const at = llhttp.malloc(response.length)
  new Uint8Array(llhttp.memory.buffer, at, response.length).set(response)
  const parse = (n) => {
    for (let i = 0; i < n; i++) {
      if (llhttp.llhttp_execute(parser, at, response.length) !== 0) throw new Error('parse error')
    }
  }
  parse(PARSES)
  await new Promise((resolve) => setTimeout(resolve, 200)) // let a background tier-up finish
  const start = process.hrtime.bigint()
  parse(PARSES)
  process.stdout.write(String(Number(process.hrtime.bigint() - start) / 1000 / PARSES))
} else {
  const tiers = { turbofan: [], liftoff: [] }
  const self = fileURLToPath(import.meta.url)
  for (let i = 0; i < RUNS; i++) {
    tiers.turbofan.push(Number(execFileSync(process.execPath, [self, 'child'])))
    tiers.liftoff.push(Number(execFileSync(process.execPath, ['--liftoff-only', self, 'child'])))
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]
  const [turbofan, liftoff] = [median(tiers.turbofan), median(tiers.liftoff)]
  console.log(`llhttp, µs per response (median of ${RUNS}): TurboFan ${turbofan.toFixed(2)}, Liftoff ${liftoff.toFixed(2)}; Liftoff costs ${(liftoff - turbofan).toFixed(2)} µs more`)
}
