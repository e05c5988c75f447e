// Run by test/runtime/heap.test.ts with --allow-natives-syntax: warms
// undici's llhttp up the way traffic does and prints the tier its parse
// function ended on ("turbofan" or "liftoff"). With --keep-liftoff it first
// does what the sidecar does at start-up.
import { createRequire } from 'node:module'
import { keepWasmOnLiftoff } from '../../src/heap.js'

interface Llhttp {
  memory: { buffer: ArrayBuffer }
  malloc(n: number): number
  llhttp_alloc(type: number): number
  llhttp_execute(parser: number, at: number, length: number): number
}
// @types/node does not declare WebAssembly; only these two are needed
const { WebAssembly: Wasm } = globalThis as unknown as {
  WebAssembly: {
    Module: new (bytes: Uint8Array) => object
    Instance: new (module: object, imports: object) => { exports: Llhttp }
  }
}

if (process.argv.includes('--keep-liftoff')) keepWasmOnLiftoff()
const require = createRequire(import.meta.url)
const constants = require('undici/lib/llhttp/constants.js') as { TYPE: { RESPONSE: number } }
const module = new Wasm.Module(require('undici/lib/llhttp/llhttp_simd-wasm.js') as Uint8Array)
const callback = (): number => 0
const llhttp = new Wasm.Instance(module, { env: new Proxy({}, { get: () => callback }) }).exports
const response = Buffer.from('HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-request-id: abc\r\n\r\nok')
const parser = llhttp.llhttp_alloc(constants.TYPE.RESPONSE)
const at = llhttp.malloc(response.length)
new Uint8Array(llhttp.memory.buffer, at, response.length).set(response)
for (let i = 0; i < 300_000; i++) llhttp.llhttp_execute(parser, at, response.length)

// the tier-up compiles in the background: wait up to 3 s for it. TypeScript
// cannot parse V8's natives syntax (%IsLiftoffFunction), hence the Function.
// eslint-disable-next-line @typescript-eslint/no-implied-eval
const tierOf = new Function('f', 'return %IsTurboFanFunction(f) ? "turbofan" : %IsLiftoffFunction(f) ? "liftoff" : "other"') as (f: unknown) => string
const deadline = Date.now() + 3000
const report = (): void => {
  const tier = tierOf(llhttp.llhttp_execute)
  if (tier === 'turbofan' || Date.now() > deadline) process.stdout.write(tier)
  else setTimeout(report, 50)
}
report()
