import { Agent, buildConnector, EnvHttpProxyAgent, type Dispatcher } from 'undici'
import type { Config } from './config/load.js'
import { watchTlsErrors } from './connector.js'
import type { ConnectTls } from './tls/files.js'

/**
 * An undici dispatcher for any origin (the auth server's discovery, token
 * and JWKS endpoints), that verifies TLS (undici's default, never turned
 * off here) and honours the egress proxy settings. `tls` is what its
 * connections present (a client certificate) and trust (CAs), directly or
 * inside a proxy's tunnel; `onTlsError` is told each connection's TLS
 * errors. Whoever calls this closes what it returns. A route's upstream,
 * one origin, has a pool and a connector of its own (connector.ts).
 */
export function createDispatcher (egress: Config['egress'], options: Agent.Options, tls: ConnectTls = {}, onTlsError?: (code: string) => void): Dispatcher {
  const { httpProxy, httpsProxy, noProxy } = egress
  const connect = onTlsError !== undefined ? { connect: watchTlsErrors(buildConnector({ ...tls }), onTlsError) } : Object.keys(tls).length === 0 ? {} : { connect: tls }
  if (httpProxy === undefined && httpsProxy === undefined) return new Agent({ ...options, ...connect })
  return new EnvHttpProxyAgent({ ...options, ...connect, ...(Object.keys(tls).length > 0 && { requestTls: tls }), httpProxy: httpProxy ?? '', httpsProxy: httpsProxy ?? '', noProxy: noProxy ?? '' })
}
