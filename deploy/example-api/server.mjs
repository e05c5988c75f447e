// The example upstream API of docker-compose.yml. It accepts only a bearer
// JWT signed by the realm (checked against its JWKS, with issuer and expiry),
// and answers with who called it. It is what auth-sidecar is for: this API
// never sees a password, and the legacy app never sees a token.
import { createServer } from 'node:http'
import { createRemoteJWKSet, jwtVerify } from 'jose'

const issuer = process.env.ISSUER ?? 'http://keycloak:8080/auth/realms/service-realm'
const jwksUrl = new URL(process.env.JWKS_URL ?? `${issuer}/protocol/openid-connect/certs`)
const port = Number(process.env.PORT ?? 3000)
const jwks = createRemoteJWKSet(jwksUrl)

function reply (res, status, body, headers = {}) {
  res.writeHead(status, { 'content-type': 'application/json', ...headers })
  res.end(JSON.stringify(body, null, 2) + '\n')
}

createServer(async (req, res) => {
  if (req.url === '/healthz') return reply(res, 200, { status: 'ok' })
  const match = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')
  if (match === null) {
    return reply(res, 401, { error: 'missing bearer token' }, { 'www-authenticate': 'Bearer' })
  }
  try {
    const { payload } = await jwtVerify(match[1], jwks, { issuer })
    reply(res, 200, {
      message: 'hello from the example API',
      caller: payload.preferred_username,
      client: payload.azp,
      tokenExpiresInSeconds: payload.exp - Math.floor(Date.now() / 1000),
      method: req.method,
      path: req.url,
      requestId: req.headers['x-request-id']
    })
  } catch (err) {
    reply(res, 401, { error: 'invalid token', reason: err.code ?? err.message }, { 'www-authenticate': 'Bearer error="invalid_token"' })
  }
}).listen(port, '0.0.0.0', () => console.log(`example API on :${port}, trusting ${issuer}`))

process.on('SIGTERM', () => process.exit(0))
