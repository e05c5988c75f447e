import { createServer } from 'node:http'
import { connect, type AddressInfo } from 'node:net'
import type { Test } from 'tap'

/**
 * An egress proxy for tests: answers HTTP CONNECT by tunnelling to the
 * authority asked for (recorded in `tunnels`), or with 403 for those `refuse`
 * names; anything else gets 405. After `hold()`, tunnels wait until
 * `open()`: the time a client spends opening a connection, held. Closed in
 * teardown.
 */
export async function connectProxy (t: Test, refuse: (authority: string) => boolean = () => false, credentials?: { username: string, password: string }): Promise<{ url: string, tunnels: string[], hold: () => void, open: () => void }> {
  const tunnels: string[] = []
  const held: Array<() => void> = []
  let holding = false
  const proxy = createServer((_req, res) => { res.writeHead(405).end() })
  proxy.on('connect', (req, client, head) => {
    const authority = req.url ?? ''
    if (credentials !== undefined && req.headers['proxy-authorization'] !== `Basic ${Buffer.from(`${credentials.username}:${credentials.password}`).toString('base64')}`) {
      client.end('HTTP/1.1 407 Proxy Authentication Required\r\nproxy-authenticate: Basic realm="egress"\r\ncontent-length: 0\r\n\r\n')
      return
    }
    tunnels.push(authority)
    if (refuse(authority)) {
      client.end('HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n')
      return
    }
    const [host, port] = authority.split(':')
    const dial = (): void => {
      const target = connect(Number(port), host, () => {
        client.write('HTTP/1.1 200 Connection Established\r\n\r\n')
        target.write(head)
        target.pipe(client)
        client.pipe(target)
      })
      target.on('error', () => client.destroy())
      client.on('error', () => target.destroy())
      client.on('close', () => target.destroy())
    }
    if (holding) held.push(dial)
    else dial()
  })
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { proxy.closeAllConnections(); proxy.close() })
  return {
    url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
    tunnels,
    hold: () => { holding = true },
    open: () => {
      holding = false
      for (const dial of held.splice(0)) dial()
    }
  }
}
