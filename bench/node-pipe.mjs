// The floor of any proxy written on Node's sockets: a raw TCP pipe in front
// of the upstream, no HTTP parsing, no auth. Used for the streaming runs only,
// to show how much of a transfer's cost is Node moving bytes at all.
import { connect, createServer } from 'node:net'

const upstream = new URL(process.env.UPSTREAM)
const server = createServer((client) => {
  const api = connect(Number(upstream.port), upstream.hostname)
  client.pipe(api).pipe(client)
  client.on('error', () => api.destroy())
  api.on('error', () => client.destroy())
})
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + '\n')
})
process.on('SIGTERM', () => process.exit(0))
