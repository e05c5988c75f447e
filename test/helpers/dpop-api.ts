import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'
import { WebSocketServer } from 'ws'
import { DpopVerifier, type ProofVerdict } from '../../dev/dpop-proof.js'
import type { TokenServer } from '../../dev/token-server.js'

export interface DpopCall {
  method: string
  /** the request target as received, query included */
  url: string
  websocket: boolean
  /** the proof's claims, when it verified */
  claims?: Record<string, unknown>
  /** 200 (101 for a handshake) or 401 */
  status: number
  /** the WWW-Authenticate error of a 401 */
  error?: string
  bodyBytes: number
}

/**
 * An API that takes only DPoP-bound tokens of `tokens()` (a function: the
 * sidecar's harness makes its token server after this), with a valid proof
 * for each request as RFC 9449 §7 has a resource server check it: the
 * token's binding (`cnf.jkt`) to the proof's key, `ath`, `htm`, `htu`
 * against the URL it was reached at, `iat`, single-use `jti`, and with
 * `nonce` its own nonce (`DPoP-Nonce` on every answer, 401 use_dpop_nonce for
 * a stale one; with `rotateOnSwitch`, a new one comes with each 101). Answers
 * 200 (101 for a WebSocket) with what it saw; closed in teardown.
 */
export async function dpopApi (t: Test, tokens: () => TokenServer, options: { nonce?: boolean, rotateOnSwitch?: boolean } = {}): Promise<{ url: string, calls: DpopCall[], proofs: DpopVerifier }> {
  const proofs = new DpopVerifier({ nonce: options.nonce ?? false })
  const calls: DpopCall[] = []
  let origin = ''

  const check = async (req: IncomingMessage): Promise<ProofVerdict | { ok: false, error: 'invalid_token', description: string }> => {
    const token = tokens().verify(req.headers.authorization)
    if (!token.ok) return { ok: false, error: 'invalid_token', description: token.reason }
    if (token.jkt === undefined) return { ok: false, error: 'invalid_token', description: 'not a DPoP-bound token' }
    return await proofs.verify(req.headers.dpop, {
      method: req.method ?? '',
      url: origin + (req.url ?? ''),
      accessToken: req.headers.authorization!.slice('DPoP '.length),
      boundTo: token.jkt
    })
  }
  const challenge = (error: string): Record<string, string> => ({
    'www-authenticate': `DPoP algs="ES256 EdDSA RS256 PS256", error="${error}"`,
    ...(proofs.nonce !== undefined && { 'dpop-nonce': proofs.nonce })
  })

  const server = createServer((req, res) => {
    let bodyBytes = 0
    req.on('data', (c: Buffer) => { bodyBytes += c.length })
    req.on('end', () => {
      check(req).then((verdict) => {
        const call: DpopCall = { method: req.method ?? '', url: req.url ?? '', websocket: false, status: verdict.ok ? 200 : 401, bodyBytes }
        if (verdict.ok) call.claims = verdict.claims
        else call.error = verdict.error
        calls.push(call)
        const headers = verdict.ok ? (proofs.nonce === undefined ? {} : { 'dpop-nonce': proofs.nonce }) : challenge(verdict.error)
        res.writeHead(call.status, { 'content-type': 'application/json', ...headers })
        res.end(JSON.stringify(verdict.ok ? { method: call.method, url: call.url } : { error: verdict.error }))
      }, (err: unknown) => { res.destroy(err as Error) })
    })
  })
  const wss = new WebSocketServer({ noServer: true })
  // the nonce goes with the switch too, a new one when asked
  wss.on('headers', (headers) => {
    if (options.rotateOnSwitch === true) proofs.rotateNonce()
    if (proofs.nonce !== undefined) headers.push(`DPoP-Nonce: ${proofs.nonce}`)
  })
  server.on('upgrade', (req, socket, head) => {
    check(req).then((verdict) => {
      const call: DpopCall = { method: req.method ?? '', url: req.url ?? '', websocket: true, status: verdict.ok ? 101 : 401, bodyBytes: 0 }
      if (verdict.ok) call.claims = verdict.claims
      else call.error = verdict.error
      calls.push(call)
      if (!verdict.ok) {
        const headers = Object.entries(challenge(verdict.error)).map(([name, value]) => `${name}: ${value}\r\n`).join('')
        socket.end(`HTTP/1.1 401 Unauthorized\r\n${headers}content-length: 0\r\nconnection: close\r\n\r\n`)
        return
      }
      wss.handleUpgrade(req, socket, head, (ws) => {
        ws.on('message', (data) => { ws.send(`echo ${String(data)}`) })
      })
    }, () => { socket.destroy() })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  t.teardown(() => {
    for (const ws of wss.clients) ws.terminate()
    server.closeAllConnections()
    server.close()
  })
  return { url: origin, calls, proofs }
}
