// A raw TCP pipe in front of an upstream (UPSTREAM), no HTTP parsing, no
// auth: what any proxy written on Node's sockets grows by when it moves bytes.
// Plain JavaScript, so that it runs without tap's loader and its memory.
import { connect, createServer } from 'node:net'

const upstream = new URL(process.env.UPSTREAM)
const server = createServer((client) => {
  const api = connect(Number(upstream.port), upstream.hostname)
  client.pipe(api).pipe(client)
  client.on('error', () => api.destroy())
  api.on('error', () => client.destroy())
})
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + '\n')
})
