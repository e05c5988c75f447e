/// <reference path="./types/undici-internals.d.ts" />
import UndiciAgent from 'undici/lib/dispatcher/agent.js'
import Dispatcher from 'undici/lib/dispatcher/dispatcher.js'
import EnvHttpProxyAgent from 'undici/lib/dispatcher/env-http-proxy-agent.js'
import UndiciPool from 'undici/lib/dispatcher/pool.js'
import api from 'undici/lib/api/index.js'

/**
 * The parts of undici the sidecar uses, imported one by one: undici's index
 * loads everything (fetch, cache stores, its WebSocket, mocks), which cost
 * 125 ms and 19 MB of the start-up; a Pool and the request API cost 21 ms.
 * The paths are undici 7's own (the package has no "exports" map);
 * src/types/undici-internals.d.ts types them, and the tests exercise each.
 *
 * As undici's index does, the request API (request, stream, pipeline,
 * upgrade, connect) goes onto Dispatcher.prototype: ProxyAgent tunnels with
 * `connect()`, and the token client uses `request()`.
 */
Object.assign(Dispatcher.prototype, api)

export { UndiciAgent, UndiciPool, EnvHttpProxyAgent }
