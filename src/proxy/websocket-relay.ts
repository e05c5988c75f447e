import { WebSocket, type RawData } from 'ws'

const { OPEN, CONNECTING } = WebSocket

/**
 * Bytes a side may have waiting to be written before the other side is no
 * longer read: a slow reader holds up its peer instead of the sidecar
 * buffering for it.
 */
const HIGH_WATER_BYTES = 1024 * 1024

/** Close codes that may not be sent in a close frame (RFC 6455 §7.4.1), and what is sent instead. */
export function sendableCode (code: number): number {
  if (code === 1005) return 1000 // no status given: a normal close
  if (code === 1006 || code === 1015 || code < 1000 || code >= 5000 || code === 1004) return 1014 // bad gateway
  return code
}

/**
 * Relays messages, pings, pongs and the close between two open WebSockets.
 * A message larger than the sockets' maxPayload is refused by ws with 1009,
 * which then reaches the other side too. While one side has more than
 * HIGH_WATER_BYTES waiting to be written, the other is not read.
 */
export function relay (downstream: WebSocket, upstream: WebSocket): void {
  const forward = (from: WebSocket, to: WebSocket) => (data: RawData, isBinary: boolean): void => {
    if (to.readyState !== OPEN) return
    to.send(data, { binary: isBinary }, () => {
      if (from.isPaused && to.bufferedAmount < HIGH_WATER_BYTES) from.resume()
    })
    if (to.bufferedAmount >= HIGH_WATER_BYTES) from.pause()
  }
  downstream.on('message', forward(downstream, upstream))
  upstream.on('message', forward(upstream, downstream))
  downstream.on('ping', (d) => { if (upstream.readyState === OPEN) upstream.ping(d) })
  upstream.on('ping', (d) => { if (downstream.readyState === OPEN) downstream.ping(d) })
  downstream.on('pong', (d) => { if (upstream.readyState === OPEN) upstream.pong(d) })
  upstream.on('pong', (d) => { if (downstream.readyState === OPEN) downstream.pong(d) })
  const closeOther = (other: WebSocket) => (code: number, reason: Buffer): void => {
    if (other.isPaused) other.resume()
    if (other.readyState === OPEN || other.readyState === CONNECTING) {
      other.close(sendableCode(code), code === 1006 ? 'upstream closed abnormally' : reason)
    }
  }
  downstream.on('close', closeOther(upstream))
  upstream.on('close', closeOther(downstream))
  // ws closes the side that failed itself; the other side hears why at once
  const failed = (other: WebSocket) => (err: Error & { code?: string }): void => {
    closeOther(other)(err.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH' ? 1009 : 1006, Buffer.alloc(0))
  }
  downstream.on('error', failed(upstream))
  upstream.on('error', failed(downstream))
}
