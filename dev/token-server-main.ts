/**
 * `node dist/dev/token-server.js`: the development token server as a process
 * of its own (for the benchmark, and standing in for Keycloak in the image
 * check's compose run). Prints one JSON line with its URLs.
 * TOKEN_SECONDS sets the access token lifetime (default 10), REFRESH_SECONDS
 * the refresh token's, PORT the port, HOST the address (127.0.0.1),
 * PUBLIC_URL the URL clients reach it at (for `iss`), CLIENT_SECRET makes
 * legacy-app a confidential client.
 */
import { TokenServer } from './token-server.js'

const server = new TokenServer({
  accessTokenSeconds: Number(process.env.TOKEN_SECONDS ?? 10),
  refreshTokenSeconds: Number(process.env.REFRESH_SECONDS ?? 60),
  ...(process.env.PUBLIC_URL !== undefined && { publicUrl: process.env.PUBLIC_URL }),
  clients: { 'legacy-app': process.env.CLIENT_SECRET }
})
await server.listen(Number(process.env.PORT ?? 0), process.env.HOST ?? '127.0.0.1')
process.stdout.write(JSON.stringify({ url: server.url, tokenUrl: server.tokenUrl }) + '\n')

// The grants it answered, for the benchmark's count.
process.on('message', () => {
  process.send?.({ grants: server.grants.length })
})
process.on('SIGTERM', () => { void server.close().then(() => process.exit(0)) })
