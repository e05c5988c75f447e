import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { gunzipSync } from 'node:zlib'

/** One POST as the receiver got it. */
export interface OtlpPost {
  path: string
  contentType: string
  body: Buffer
}

/** A span of an OTLP/JSON export, its attributes flattened to values. */
export interface OtlpSpan {
  traceId: string
  spanId: string
  parentSpanId: string | undefined
  name: string
  kind: 'INTERNAL' | 'SERVER' | 'CLIENT' | 'PRODUCER' | 'CONSUMER' | 'UNKNOWN'
  attributes: Record<string, unknown>
  links: Array<{ traceId: string, spanId: string }>
  /** the resource's attributes (service.name...) */
  resource: Record<string, unknown>
}

interface JsonAttribute { key: string, value: Record<string, unknown> }
interface JsonSpan { traceId: string, spanId: string, parentSpanId?: string, name: string, kind: number, attributes?: JsonAttribute[], links?: Array<{ traceId: string, spanId: string }> }
interface JsonExport { resourceSpans?: Array<{ resource?: { attributes?: JsonAttribute[] }, scopeSpans?: Array<{ spans?: JsonSpan[] }> }> }

const KINDS = ['UNKNOWN', 'INTERNAL', 'SERVER', 'CLIENT', 'PRODUCER', 'CONSUMER'] as const

/**
 * Stands in for an OpenTelemetry Collector's OTLP/HTTP receiver: records
 * every POST and answers it as a collector does (200, an empty
 * ExportTraceServiceResponse). Reads OTLP/JSON exports; protobuf ones are
 * kept as bytes, undecoded.
 */
export class OtlpReceiver {
  readonly posts: OtlpPost[] = []
  readonly #server: Server

  constructor () {
    this.#server = createServer((req, res) => {
      const chunks: Buffer[] = []
      req.on('data', (c: Buffer) => chunks.push(c))
      req.on('end', () => {
        const raw = Buffer.concat(chunks)
        const contentType = req.headers['content-type'] ?? ''
        this.posts.push({ path: req.url ?? '', contentType, body: req.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw })
        const json = contentType.startsWith('application/json')
        res.writeHead(200, { 'content-type': json ? 'application/json' : 'application/x-protobuf' })
        res.end(json ? '{}' : '')
      })
    })
  }

  /** Listens on a port of the kernel's choice; resolves with its base URL. */
  async listen (): Promise<string> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve))
    return this.url
  }

  get url (): string {
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`
  }

  async close (): Promise<void> {
    this.#server.closeAllConnections()
    await new Promise<void>((resolve) => this.#server.close(() => resolve()))
  }

  /** Every JSON export received, as one text (for what must never be in it). */
  jsonText (): string {
    return this.posts.filter((p) => p.contentType.startsWith('application/json')).map((p) => p.body.toString('utf8')).join('\n')
  }

  /** The spans of every JSON export received, in the order they came. */
  spans (): OtlpSpan[] {
    const spans: OtlpSpan[] = []
    for (const post of this.posts) {
      if (!post.contentType.startsWith('application/json')) continue
      const body = JSON.parse(post.body.toString('utf8')) as JsonExport
      for (const rs of body.resourceSpans ?? []) {
        const resource = flatten(rs.resource?.attributes)
        for (const ss of rs.scopeSpans ?? []) {
          for (const s of ss.spans ?? []) {
            spans.push({
              traceId: s.traceId,
              spanId: s.spanId,
              parentSpanId: s.parentSpanId === '' ? undefined : s.parentSpanId,
              name: s.name,
              kind: KINDS[s.kind] ?? 'UNKNOWN',
              attributes: flatten(s.attributes),
              links: (s.links ?? []).map((l) => ({ traceId: l.traceId, spanId: l.spanId })),
              resource
            })
          }
        }
      }
    }
    return spans
  }
}

/** OTLP's typed attribute values (`{ stringValue }`, `{ intValue }`...) as plain ones. */
function flatten (attributes: JsonAttribute[] = []): Record<string, unknown> {
  return Object.fromEntries(attributes.map(({ key, value }) => {
    if ('intValue' in value) return [key, Number(value.intValue)]
    const [only] = Object.values(value)
    return [key, only]
  }))
}
