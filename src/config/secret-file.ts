import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs'
import { open } from 'node:fs/promises'
import { SecretFileError } from './errors.js'

/** The largest credential file read: far above any key, certificate chain or token, far below harm. */
export const MAX_SECRET_FILE_BYTES = 64 * 1024
/** The largest CA file read: room for a system bundle (Debian's is some 220 KB) and a company's CAs with it. */
export const MAX_CA_FILE_BYTES = 1024 * 1024

// Opening without blocking: a FIFO put where a file was expected would
// otherwise hold the open (and the whole process, when synchronous) until
// something writes to it.
const FLAGS = constants.O_RDONLY | constants.O_NONBLOCK

/**
 * A mounted secret's content, without the trailing newline editors add:
 * a regular file of at most `max` bytes. Synchronous, for reading the
 * configuration at start.
 */
export function readSecretFileSync (path: string, max = MAX_SECRET_FILE_BYTES): string {
  let fd: number
  try {
    fd = openSync(path, FLAGS)
  } catch (err) {
    throw unreadable(err)
  }
  try {
    checkStat(fstatSync(fd), max)
    const buffer = Buffer.alloc(max + 1)
    let length = 0
    for (let n; length < buffer.length && (n = readSync(fd, buffer, length, buffer.length - length, null)) > 0;) length += n
    return text(buffer.subarray(0, length), max)
  } finally {
    closeSync(fd)
  }
}

/** The same, read without holding up the event loop, for reading credentials while the sidecar runs. */
export async function readSecretFile (path: string, max = MAX_SECRET_FILE_BYTES): Promise<string> {
  const handle = await open(path, FLAGS).catch((err: unknown) => { throw unreadable(err) })
  try {
    checkStat(await handle.stat(), max)
    const buffer = Buffer.alloc(max + 1)
    let length = 0
    for (let n; length < buffer.length && (n = (await handle.read(buffer, length, buffer.length - length, null)).bytesRead) > 0;) length += n
    return text(buffer.subarray(0, length), max)
  } finally {
    await handle.close()
  }
}

function checkStat (stat: { isFile(): boolean, size: number }, max: number): void {
  if (!stat.isFile()) throw new SecretFileError('not_a_file', 'is not a regular file')
  if (stat.size > max) throw tooLarge(max)
}

function text (bytes: Buffer, max: number): string {
  // the file grew between the check and the read
  if (bytes.length > max) throw tooLarge(max)
  return bytes.toString('utf8').replace(/[\r\n]+$/, '')
}

function tooLarge (max: number): SecretFileError {
  return new SecretFileError('too_large', `is larger than ${max / 1024} KiB`)
}

function unreadable (err: unknown): SecretFileError {
  const code = (err as NodeJS.ErrnoException).code ?? 'error'
  return new SecretFileError(code, `cannot be read (${code})`)
}
