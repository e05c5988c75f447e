import { EventEmitter } from 'node:events'
import type { Socket } from 'node:net'
import t from 'tap'
import { PIPELINE_DEPTH, PipelineGate } from '../../src/proxy/pipeline.js'

/** What the gate touches of a server socket: its libuv handle's reading switch, and the stream's state. */
class FakeSocket extends EventEmitter {
  readableFlowing: boolean | null = true
  writableNeedDrain = false
  destroyed = false
  readonly calls: string[] = []
  readonly _handle = {
    reading: true,
    readStop: () => { this.calls.push('readStop'); return 0 },
    readStart: () => { this.calls.push('readStart'); return 0 }
  }
}

function arrive (gate: PipelineGate, socket: FakeSocket, admitted: number[], n: number): void {
  const s = socket as unknown as Socket
  if (gate.enter(s)) admitted.push(n)
  else gate.hold(s, () => admitted.push(n))
}

/** A gate of depth 1 whose socket has one request worked on and one held (reading stopped). */
function oneWorkedOnOneHeld (): { gate: PipelineGate, socket: FakeSocket, admitted: number[] } {
  const gate = new PipelineGate(1)
  const socket = new FakeSocket()
  const admitted: number[] = []
  arrive(gate, socket, admitted, 0)
  arrive(gate, socket, admitted, 1)
  return { gate, socket, admitted }
}

t.test('PIPELINE_DEPTH requests are worked on at once; the next is held and the socket stops reading', async (t) => {
  const gate = new PipelineGate()
  const socket = new FakeSocket()
  const admitted: number[] = []
  for (let i = 0; i < PIPELINE_DEPTH + 3; i++) arrive(gate, socket, admitted, i)
  t.same(admitted, Array.from({ length: PIPELINE_DEPTH }, (_, i) => i))
  t.same(socket.calls, ['readStop'])
  t.equal(socket._handle.reading, false)
  gate.leave(socket as unknown as Socket)
  t.same(admitted.at(-1), PIPELINE_DEPTH, 'one answered, the oldest held one goes on')
  for (let i = 0; i < PIPELINE_DEPTH + 1; i++) gate.leave(socket as unknown as Socket)
  t.equal(admitted.length, PIPELINE_DEPTH + 3, 'all held ones went on, in order')
  t.same(admitted, [...admitted].sort((a, b) => a - b))
  t.same(socket.calls, ['readStop'], 'not read again while one is unanswered')
  gate.leave(socket as unknown as Socket)
  t.same(socket.calls, ['readStop', 'readStart'], 'everything answered: read on')
  t.equal(socket._handle.reading, true)
})

t.test('reading stops again when Node had started it in between (its own resume after a drain)', async (t) => {
  const { gate, socket, admitted } = oneWorkedOnOneHeld()
  t.same(socket.calls, ['readStop'])
  socket._handle.reading = true // what Node's 'resume' listener does
  arrive(gate, socket, admitted, 2)
  t.same(socket.calls, ['readStop', 'readStop'])
})

t.test('answers the client has not taken yet: reading waits for the drain', async (t) => {
  const { gate, socket } = oneWorkedOnOneHeld()
  socket.writableNeedDrain = true
  gate.leave(socket as unknown as Socket)
  gate.leave(socket as unknown as Socket)
  t.same(socket.calls, ['readStop'])
  socket.writableNeedDrain = false
  socket.emit('drain')
  t.same(socket.calls, ['readStop', 'readStart'])
  t.equal(socket.listenerCount('drain'), 0)
})

t.test('a socket Node has paused itself is left for Node to resume', async (t) => {
  const { gate, socket } = oneWorkedOnOneHeld()
  socket.readableFlowing = false // Node's own pause: its answers backed up
  gate.leave(socket as unknown as Socket)
  gate.leave(socket as unknown as Socket)
  t.same(socket.calls, ['readStop'], 'no readStart against Node\'s pause')
})

t.test('a socket without a handle (an injected request) is only held', async (t) => {
  const gate = new PipelineGate(1)
  const socket = { } as unknown as Socket
  const admitted: number[] = []
  t.equal(gate.enter(socket), true)
  t.equal(gate.enter(socket), false)
  gate.hold(socket, () => admitted.push(1))
  gate.leave(socket)
  t.same(admitted, [1])
  gate.leave(socket)
})

t.test('the client gone, nothing held goes on', async (t) => {
  const gate = new PipelineGate(1)
  const socket = new FakeSocket()
  const admitted: number[] = []
  for (let i = 0; i < 5; i++) arrive(gate, socket, admitted, i)
  socket.destroyed = true
  for (let i = 0; i < 5; i++) gate.leave(socket as unknown as Socket)
  t.same(admitted, [0])
  t.same(socket.calls, ['readStop'])
})
