import type { Socket } from 'node:net'

/** Requests of one connection worked on at once; more wait their turn (SPEC §10.4). */
export const PIPELINE_DEPTH = 8

interface Line {
  /** requests that arrived on the connection and are not answered or abandoned yet, held ones included */
  unanswered: number
  /** the held requests' go-aheads, oldest first */
  held: Array<() => void>
  /** this gate paused the socket */
  paused: boolean
  /** a resume waits for the socket's 'drain' */
  draining: boolean
}

const kLine = Symbol('auth-sidecar pipeline')
/** libuv's stream handle under a net.Socket: what Node's own HTTP server starts and stops reading with */
interface ReadHandle { reading: boolean, readStart(): number, readStop(): number }
type Tagged = Socket & { [kLine]?: Line, _handle?: Partial<ReadHandle> | null }

/**
 * A connection's pipelined requests are read as they are answered, as nginx
 * does (SPEC §10.4): at most PIPELINE_DEPTH of them are worked on; a request
 * beyond that is held and its socket paused, and reading goes on once every
 * request read so far has been answered and the client has taken the
 * answers (no pending 'drain').
 *
 * Why: Node reads up to 64 KiB at a time and parses all of it at once, and
 * its own pause (at 16 KiB of answers waiting to be written) comes only when
 * answers pile up, which they do not while the upstream is working: a client
 * that sent 20,000 GETs on one connection and read nothing had them all
 * parsed and worked on together (up to PROXY_MAX_REQUESTS forwarded at once,
 * +130 MB). Held, a read is at most one 64 KiB chunk of requests.
 *
 * How reading is stopped, PITFALLS-style: Node's HTTP server gives a
 * connection's socket to its C++ parser, which reads on its own;
 * `socket.pause()` stops it, but Node calls `socket.resume()` again at the
 * end of every request it parses (`readStart` in `parserOnMessageComplete`),
 * so a paused flood went on being read: all 20,000 parsed, on Node 20 and
 * 24 alike. Node's own flood guard holds its pause with a private flag.
 * There is no public switch, so the gate stops the socket's handle exactly as
 * Node's 'pause' listener does (`reading = false; readStop()`), leaving the
 * stream's flowing state alone so that Node's resume at the end of a request
 * is a no-op, and starts it again as Node's 'resume' listener does. When
 * Node has paused the socket itself (its answers backed up: the stream is not
 * flowing), the gate leaves the restart to Node. Without a handle (a test's
 * injected request) the gate only holds.
 */
export class PipelineGate {
  readonly #depth: number

  constructor (depth = PIPELINE_DEPTH) {
    this.#depth = depth
  }

  /**
   * A request arrived on `socket`: true when it may be worked on now, else
   * the caller hands its go-ahead to `hold`. Either way `leave` follows.
   */
  enter (socket: Socket): boolean {
    const line = (socket as Tagged)[kLine] ??= { unanswered: 0, held: [], paused: false, draining: false }
    line.unanswered++
    return line.held.length === 0 && line.unanswered <= this.#depth
  }

  /** `admit` runs when the request's turn comes; one abandoned by then must not go on. */
  hold (socket: Socket, admit: () => void): void {
    const line = (socket as Tagged)[kLine]!
    line.held.push(admit)
    line.paused = true
    // every time: Node may have started reading again since (its own resume)
    const handle = (socket as Tagged)._handle
    if (handle?.reading === true && typeof handle.readStop === 'function') {
      handle.reading = false
      handle.readStop()
    }
  }

  /** A request that `enter` was called for is answered or abandoned. */
  leave (socket: Socket): void {
    const line = (socket as Tagged)[kLine]
    if (line === undefined) return
    line.unanswered--
    if (socket.destroyed) {
      // the client is gone: what it sent and the sidecar held is not sent on
      // (the held requests' own aborts come later, one tick each)
      line.held.length = 0
      return
    }
    while (line.held.length > 0 && line.unanswered - line.held.length < this.#depth) line.held.shift()!()
    if (line.paused && line.unanswered === 0) this.#resume(socket as Tagged, line)
  }

  #resume (socket: Tagged, line: Line): void {
    if (socket.destroyed) return
    if (socket.writableNeedDrain) {
      if (line.draining) return
      line.draining = true
      socket.once('drain', () => {
        line.draining = false
        if (line.paused && line.unanswered === 0) this.#resume(socket, line)
      })
      return
    }
    line.paused = false
    const handle = socket._handle
    if (handle?.reading === false && typeof handle.readStart === 'function' && socket.readableFlowing !== false) {
      handle.reading = true
      handle.readStart()
    }
  }
}
