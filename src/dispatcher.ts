import { Agent, EnvHttpProxyAgent, Pool, type Dispatcher } from 'undici'
import type { Config } from './config/load.js'

/**
 * An undici dispatcher that verifies TLS (undici's default, never turned
 * off here) and honours the egress proxy settings; for a single origin
 * without a proxy, a Pool (no per-request origin lookup). Whoever calls this
 * closes what it returns.
 *
 * Why our own: @fastify/reply-from 12.6 creates its undici Agent with
 * `rejectUnauthorized: false`, so an untrusted upstream certificate would be
 * accepted (test/e2e/tls.test.ts).
 */
export function createDispatcher (egress: Config['egress'], origin: string | undefined, options: Agent.Options): Dispatcher {
  const { httpProxy, httpsProxy, noProxy } = egress
  if (httpProxy === undefined && httpsProxy === undefined) {
    return origin === undefined ? new Agent(options) : new Pool(origin, options)
  }
  return new EnvHttpProxyAgent({ ...options, httpProxy: httpProxy ?? '', httpsProxy: httpsProxy ?? '', noProxy: noProxy ?? '' })
}
