import { createServer, type IncomingHttpHeaders, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createRemoteJWKSet, jwtVerify, type JWTPayload } from 'jose'
import type { Test } from 'tap'

export interface Verdict {
  at: number
  path: string
  ok: boolean
  /** why the token was refused */
  reason?: string
  claims?: JWTPayload
  token?: string
  headers: IncomingHttpHeaders
}

/**
 * An API that accepts only the realm's tokens, as a real resource server
 * does: the bearer token's signature checked against the realm's JWKS, its
 * issuer and expiry. 200 with the caller's name, else 401. Closed in teardown.
 */
export async function resourceServer (t: Test, issuer: string, jwksUrl: string): Promise<{ url: string, verdicts: Verdict[], server: Server }> {
  const jwks = createRemoteJWKSet(new URL(jwksUrl))
  const verdicts: Verdict[] = []
  const server = createServer((req, res) => {
    const header = req.headers.authorization ?? ''
    const token = header.startsWith('Bearer ') ? header.slice(7) : undefined
    const verdict: Verdict = { at: Date.now(), path: req.url ?? '', ok: false, headers: req.headers, ...(token !== undefined && { token }) }
    verdicts.push(verdict)
    req.resume()
    const answer = (status: number, body: object): void => {
      res.writeHead(status, { 'content-type': 'application/json', ...(status === 401 && { 'www-authenticate': 'Bearer error="invalid_token"' }) })
      res.end(JSON.stringify(body))
    }
    if (token === undefined) {
      verdict.reason = 'no bearer token'
      return answer(401, { error: 'invalid_token' })
    }
    jwtVerify(token, jwks, { issuer }).then(({ payload }) => {
      verdict.ok = true
      verdict.claims = payload
      answer(200, { caller: payload.preferred_username ?? payload.azp })
    }, (err: Error) => {
      verdict.reason = err.message
      answer(401, { error: 'invalid_token' })
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, verdicts, server }
}
