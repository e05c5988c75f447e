import { unwatchFile, watchFile } from 'node:fs'

/** How often a watched file is looked at (secrets, certificates, CONFIG_FILE). */
export const FILE_POLL_MS = 1_000

/**
 * Calls `changed` when one of `files` changes; returns what stops watching.
 * The files are polled, not watched for events: a poll stats the path, so a
 * Kubernetes volume's update, which swaps the symlink the path goes through
 * rather than writing the file, is seen as well.
 */
export function watchFiles (files: readonly string[], changed: () => void): () => void {
  const listener = (): void => { changed() }
  for (const file of files) watchFile(file, { interval: FILE_POLL_MS, persistent: false }, listener)
  return () => { for (const file of files) unwatchFile(file, listener) }
}
