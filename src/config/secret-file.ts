import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs'
import { open } from 'node:fs/promises'

/** The largest credential file read: far above any key, certificate chain or token, far below harm. */
export const MAX_SECRET_FILE_BYTES = 64 * 1024

/** A credential file that cannot be used; the message names why, never the content. */
export class SecretFileError extends Error {
  readonly code: string
  constructor (code: string, message: string) {
    super(message)
    this.name = 'SecretFileError'
    this.code = code
  }
}

// Opening without blocking: a FIFO put where a file was expected would
// otherwise hold the open (and the whole process, when synchronous) until
// something writes to it.
const FLAGS = constants.O_RDONLY | constants.O_NONBLOCK

/**
 * A mounted secret's content, without the trailing newline editors add:
 * a regular file of at most MAX_SECRET_FILE_BYTES. Synchronous, for reading
 * the configuration at start.
 */
export function readSecretFileSync (path: string): string {
  let fd: number
  try {
    fd = openSync(path, FLAGS)
  } catch (err) {
    throw unreadable(err)
  }
  try {
    checkStat(fstatSync(fd))
    const buffer = Buffer.alloc(MAX_SECRET_FILE_BYTES + 1)
    let length = 0
    for (let n; length < buffer.length && (n = readSync(fd, buffer, length, buffer.length - length, null)) > 0;) length += n
    return text(buffer.subarray(0, length))
  } finally {
    closeSync(fd)
  }
}

/** The same, read without holding up the event loop, for reading credentials while the sidecar runs. */
export async function readSecretFile (path: string): Promise<string> {
  const handle = await open(path, FLAGS).catch((err: unknown) => { throw unreadable(err) })
  try {
    checkStat(await handle.stat())
    const buffer = Buffer.alloc(MAX_SECRET_FILE_BYTES + 1)
    let length = 0
    for (let n; length < buffer.length && (n = (await handle.read(buffer, length, buffer.length - length, null)).bytesRead) > 0;) length += n
    return text(buffer.subarray(0, length))
  } finally {
    await handle.close()
  }
}

function checkStat (stat: { isFile(): boolean, size: number }): void {
  if (!stat.isFile()) throw new SecretFileError('not_a_file', 'is not a regular file')
  if (stat.size > MAX_SECRET_FILE_BYTES) throw new SecretFileError('too_large', `is larger than ${MAX_SECRET_FILE_BYTES / 1024} KiB`)
}

function text (bytes: Buffer): string {
  // the file grew between the check and the read
  if (bytes.length > MAX_SECRET_FILE_BYTES) throw new SecretFileError('too_large', `is larger than ${MAX_SECRET_FILE_BYTES / 1024} KiB`)
  return bytes.toString('utf8').replace(/[\r\n]+$/, '')
}

function unreadable (err: unknown): SecretFileError {
  const code = (err as NodeJS.ErrnoException).code ?? 'error'
  return new SecretFileError(code, `cannot be read (${code})`)
}
