/**
 * Node's lazy `globalThis.Headers`, set aside while the dependencies load
 * and put back, untouched, before the sidecar runs. This module must be the
 * first import of an entry point: ES modules run in the order of their
 * imports, and this one has none.
 *
 * PITFALLS: undici's index reads `globalThis.Headers` as it loads (its
 * cookie helpers accept Node's own Headers too). In Node that global is a
 * getter which loads Node's bundled copy of undici, the one behind the
 * global `fetch`: 17 ms of start-up, and 35 ms when node is given V8
 * options, as the image gives it (any V8 option turns off the code cache of
 * Node's built-in modules, so they are compiled from source). The sidecar
 * never uses Node's fetch. While the getter is set aside, undici's cookie
 * helpers (which the sidecar does not call) learn only undici's own
 * Headers; the global, once put back, loads on first use as before
 * (test/e2e/startup.test.ts).
 *
 * Node 20 only. Node 20 defines the global as an accessor, which can be
 * read without loading anything. Node 24 loads its undici as soon as the
 * property is inspected at all, and an ES import of node:http loads it there
 * too (the module's ES facade reads the lazy `http.WebSocket`), so from Node
 * 22 the sidecar leaves the global alone and pays what that costs.
 */
const NODE_MAJOR = Number(process.versions.node.split('.')[0])
const headers = NODE_MAJOR < 22 ? Object.getOwnPropertyDescriptor(globalThis, 'Headers') : undefined
const lazy = headers !== undefined && headers.get !== undefined && headers.configurable === true
if (lazy) Object.defineProperty(globalThis, 'Headers', { configurable: true, writable: true, value: undefined })

/** Puts `globalThis.Headers` back as Node defined it. */
export function restoreFetchGlobal (): void {
  if (lazy && headers !== undefined) Object.defineProperty(globalThis, 'Headers', headers)
}
