import { createServer, type Server } from 'node:http'
import type { TokenServer } from './token-server.js'

/**
 * The demo's upstream API: it checks the bearer token against the
 * development token server and answers with who called it. A request with no
 * valid token gets 401, as a real API would.
 */
export function createEchoUpstream (tokens: TokenServer): Server {
  return createServer((req, res) => {
    const verdict = tokens.verify(req.headers.authorization)
    let size = 0
    req.on('data', (c: Buffer) => { size += c.length })
    req.on('end', () => {
      const body = verdict.ok
        ? { authenticated: true, user: verdict.user, client: verdict.client, audience: verdict.audience, tokenExpiresInSeconds: Math.round(verdict.expiresIn), method: req.method, url: req.url, bodyBytes: size, requestId: req.headers['x-request-id'] }
        : { authenticated: false, reason: verdict.reason }
      const text = JSON.stringify(body, null, 2) + '\n'
      res.writeHead(verdict.ok ? 200 : 401, {
        'content-type': 'application/json',
        ...(!verdict.ok && { 'www-authenticate': 'Bearer error="invalid_token"' })
      })
      res.end(text)
    })
  })
}
