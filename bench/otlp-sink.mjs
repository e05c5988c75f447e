// The tracing part's receiver (bench/run.mjs): stands in for an
// OpenTelemetry Collector's OTLP/HTTP endpoint, answering every export as a
// collector does (200, an empty ExportTraceServiceResponse), and counts the
// spans of the protobuf exports (the exporter's default) so that the bench
// can show how many spans each variant really sent. Asked over IPC with
// 'spans', it answers { spans, exports, malformed }.
import { createServer } from 'node:http'
import { gunzipSync } from 'node:zlib'

let spans = 0
let exports = 0
let malformed = 0

/** The length-delimited fields numbered `field` of a protobuf message. */
function * messages (buf, field) {
  let i = 0
  const varint = () => {
    let value = 0
    for (let shift = 0; ; shift += 7) {
      if (i >= buf.length) throw new Error('truncated varint')
      const byte = buf[i++]
      value += (byte & 0x7f) * 2 ** shift
      if (byte < 0x80) return value
    }
  }
  while (i < buf.length) {
    const key = varint()
    const type = key & 7
    if (type === 0) varint()
    else if (type === 1) i += 8
    else if (type === 5) i += 4
    else if (type === 2) {
      const length = varint()
      if (i + length > buf.length) throw new Error('truncated field')
      if (key >>> 3 === field) yield buf.subarray(i, i + length)
      i += length
    } else throw new Error(`wire type ${type} is not one OTLP uses`)
  }
}

// ExportTraceServiceRequest.resource_spans (1) > ResourceSpans.scope_spans (2) > ScopeSpans.spans (2)
const countSpans = (request) => {
  let n = 0
  for (const resource of messages(request, 1)) for (const scope of messages(resource, 2)) for (const _ of messages(scope, 2)) n++
  return n
}

const server = createServer((req, res) => {
  const chunks = []
  req.on('data', (c) => chunks.push(c))
  req.on('end', () => {
    const raw = Buffer.concat(chunks)
    exports++
    try {
      if (req.headers['content-type'] === 'application/x-protobuf') spans += countSpans(req.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw)
    } catch {
      malformed++
    }
    res.writeHead(200, { 'content-type': 'application/x-protobuf' })
    res.end()
  })
})
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(JSON.stringify({ url: `http://127.0.0.1:${server.address().port}` }) + '\n')
})
process.on('message', (m) => { if (m === 'spans') process.send({ spans, exports, malformed }) })
process.on('SIGTERM', () => process.exit(0))
