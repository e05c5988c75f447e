/**
 * `node dist/dev-token-server.js`: the development token server as a process
 * of its own (for the benchmark). Prints one JSON line with its URLs.
 * TOKEN_SECONDS sets the access token lifetime (default 10), PORT the port.
 */
import { TokenServer } from './token-server.js'

const server = new TokenServer({
  accessTokenSeconds: Number(process.env.TOKEN_SECONDS ?? 10),
  refreshTokenSeconds: Number(process.env.REFRESH_SECONDS ?? 60)
})
await server.listen(Number(process.env.PORT ?? 0))
process.stdout.write(JSON.stringify({ url: server.url, tokenUrl: server.tokenUrl }) + '\n')

// The grants it answered, for the benchmark's count.
process.on('message', () => {
  process.send?.({ grants: server.grants.length })
})
process.on('SIGTERM', () => { void server.close().then(() => process.exit(0)) })
