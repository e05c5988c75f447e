import { type Stats, unwatchFile, watchFile } from 'node:fs'
import { stat } from 'node:fs/promises'

/** How often a watched file is looked at (secrets, certificates, CONFIG_FILE). */
export const FILE_POLL_MS = 1_000

/**
 * Calls `changed` when one of `files` changes; returns what stops watching.
 * The files are polled, not watched for events: a poll stats the path, so a
 * Kubernetes volume's update, which swaps the symlink the path goes through
 * rather than writing the file, is seen as well.
 *
 * A poll compares a file with its first stat, taken as the watch starts, so a
 * change made after the caller read the file and before that stat would be
 * seen by none. So once that stat is taken, `changed(true)` asks the caller
 * to compare what it read with what is there; a poll then finding the file as
 * that check did is not told again.
 */
export function watchFiles (files: readonly string[], changed: (check: boolean) => void): () => void {
  const checked = new Map<string, Stats>()
  let watching = true
  const listeners = files.map((file) => {
    const listener = (current: Stats): void => {
      // a poll's change is newer than the first stat: the check is not needed (should both run, the caller looks twice, finding the same)
      clearTimeout(check)
      const seen = checked.get(file)
      checked.delete(file)
      if (seen === undefined || !sameFile(seen, current)) changed(false)
    }
    watchFile(file, { interval: FILE_POLL_MS, persistent: false }, listener)
    return [file, listener] as const
  })
  const check = setTimeout(() => {
    void Promise.all(files.map(async (file) => {
      const now = await stat(file).catch(() => undefined)
      if (now !== undefined) checked.set(file, now)
    })).then(() => { if (watching) changed(true) })
  }, FILE_POLL_MS / 2)
  check.unref()
  return () => {
    watching = false
    clearTimeout(check)
    for (const [file, listener] of listeners) unwatchFile(file, listener)
  }
}

function sameFile (a: Stats, b: Stats): boolean {
  return a.ino === b.ino && a.dev === b.dev && a.size === b.size && a.mtimeMs === b.mtimeMs && a.ctimeMs === b.ctimeMs
}
