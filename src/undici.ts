/// <reference path="./types/undici-internals.d.ts" />
import type { Dispatcher } from 'undici'
import UndiciAgent from 'undici/lib/dispatcher/agent.js'
import EnvHttpProxyAgent from 'undici/lib/dispatcher/env-http-proxy-agent.js'
import UndiciPool from 'undici/lib/dispatcher/pool.js'
import apiRequest from 'undici/lib/api/api-request.js'

/**
 * The parts of undici the sidecar uses, imported one by one: undici's index
 * loads everything (fetch, cache stores, its WebSocket, mocks), which cost
 * 125 ms and 19 MB of the start-up; a Pool and request() cost 21 ms.
 * The paths are undici 7's own (the package has no "exports" map);
 * src/types/undici-internals.d.ts types them, and every test that starts
 * the sidecar checks that they still load.
 */
export { UndiciAgent, UndiciPool, EnvHttpProxyAgent }

/** undici's `dispatcher.request()`. */
export function request (dispatcher: Dispatcher, opts: Dispatcher.RequestOptions): Promise<Dispatcher.ResponseData> {
  return apiRequest.call(dispatcher, opts)
}
