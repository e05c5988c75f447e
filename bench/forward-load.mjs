// The forward part's load generator (bench/run.mjs). autocannon cannot go
// through a proxy, so both ways in, through the forward proxy and straight to
// PROXY_PORT, are driven by this one: undici, the same number of
// connections and of requests in flight, so the client side is alike and
// what differs is the sidecar's work.
import { Agent, ProxyAgent } from 'undici'

/**
 * A client of `url` for one slice of load, its connections already open
 * when it is kept alive, so that the slice measures requests and not the
 * handshakes that begin it.
 *
 * - `proxy`: `{ uri, ca }`, the forward proxy and the CA its certificates are
 *   signed with; without it, the requests go straight to `url`.
 * - `newConnections`: every request on a connection of its own, closed after
 *   the answer (a CONNECT, a TLS handshake and one request, through the proxy).
 * - `resumeTls`: whether a new connection resumes an earlier TLS session, as
 *   undici (and most clients) do by default; false makes every handshake a full one.
 */
export async function openClient ({ url, proxy, connections, newConnections = false, resumeTls = true }) {
  const dispatcher = proxy === undefined
    ? new Agent({ connections })
    : new ProxyAgent({ uri: proxy.uri, requestTls: { ca: proxy.ca, ...(!resumeTls && { maxCachedSessions: 0 }) }, connections })
  const { origin, pathname, search } = new URL(url)
  const options = { origin, path: pathname + search, method: 'GET', reset: newConnections }
  if (!newConnections) {
    // as many requests at once as connections, twice: every connection is opened
    for (let i = 0; i < 2; i++) {
      await Promise.all(Array.from({ length: connections }, async () => {
        const { body } = await dispatcher.request(options)
        await body.dump()
      }))
    }
  }
  return {
    load: (seconds) => keepInFlight(dispatcher, options, connections, seconds),
    close: () => dispatcher.destroy()
  }
}

/**
 * `inFlight` requests kept in flight for `seconds`: the figures bench/run.mjs
 * reads from autocannon's result (requests.total counts every answer,
 * latencies in ms), with the same names.
 */
async function keepInFlight (dispatcher, options, inFlight, seconds) {
  const latencies = []
  let answered = 0
  let non2xx = 0
  let errors = 0
  let firstError
  const started = performance.now()
  const deadline = started + seconds * 1000
  const worker = async () => {
    while (performance.now() < deadline) {
      const t0 = performance.now()
      try {
        const { statusCode, body } = await dispatcher.request(options)
        await body.dump()
        answered++
        if (statusCode < 200 || statusCode > 299) non2xx++
        latencies.push(performance.now() - t0)
      } catch (err) {
        errors++
        firstError ??= err
        // a refused connection fails at once: no busy loop on a dead target
        await new Promise((resolve) => setTimeout(resolve, 10))
      }
    }
  }
  await Promise.all(Array.from({ length: inFlight }, worker))
  const elapsed = (performance.now() - started) / 1000
  latencies.sort((a, b) => a - b)
  const at = (q) => latencies.length === 0 ? NaN : latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))]
  return {
    requests: { total: answered, average: answered / elapsed },
    latency: { p50: Number(at(0.5).toFixed(2)), p99: Number(at(0.99).toFixed(2)) },
    non2xx,
    errors,
    ...(firstError !== undefined && { firstError: `${firstError.code ?? firstError.name}: ${firstError.message}` })
  }
}

/**
 * Asks `url` (through `proxy` when given) until it answers 200, on a
 * connection that is closed after: the one request a sidecar has served
 * when its idle memory is read.
 */
export async function untilOkThrough ({ url, proxy }, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs
  const { origin, pathname } = new URL(url)
  for (;;) {
    const dispatcher = proxy === undefined ? new Agent({ connections: 1 }) : new ProxyAgent({ uri: proxy.uri, requestTls: { ca: proxy.ca }, connections: 1 })
    try {
      const { statusCode, body } = await dispatcher.request({ origin, path: pathname, method: 'GET' })
      await body.dump()
      if (statusCode === 200) return
    } catch {
    } finally {
      await dispatcher.destroy()
    }
    if (Date.now() > deadline) throw new Error(`${url}${proxy === undefined ? '' : ` through ${proxy.uri}`} never answered 200`)
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}
