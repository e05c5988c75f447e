// The library's floor: @fastify/http-proxy in front of the upstream, no auth,
// no logging, default options. What auth-sidecar is compared against.
import Fastify from 'fastify'
import proxy from '@fastify/http-proxy'

const app = Fastify({ logger: false })
await app.register(proxy, { upstream: process.env.UPSTREAM })
await app.listen({ port: Number(process.env.PORT ?? 0), host: '127.0.0.1' })
process.stdout.write(JSON.stringify({ port: app.server.address().port }) + '\n')
process.on('SIGTERM', () => { void app.close().then(() => process.exit(0)) })
