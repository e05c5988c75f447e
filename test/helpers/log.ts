import { Writable } from 'node:stream'
import { createLogger } from '../../src/logger.js'

/** A real pino logger (the production redaction included) that keeps its lines. */
export function captureLogger (level: 'debug' | 'info' = 'debug') {
  const lines: string[] = []
  const stream = new Writable({
    write (chunk: Buffer, _enc, cb) {
      lines.push(...chunk.toString().split('\n').filter(Boolean))
      cb()
    }
  })
  const logger = createLogger(level, stream)
  return {
    logger,
    lines,
    records: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>)
  }
}
