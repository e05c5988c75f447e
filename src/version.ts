import { readFileSync } from 'node:fs'

/**
 * The package's version, read from package.json beside `src/` or `dist/`
 * (the image copies package.json next to dist/); a bundled chunk in
 * `dist/chunks/` is one folder further down.
 */
export const VERSION: string = (() => {
  for (const path of ['../package.json', '../../package.json']) {
    try {
      return (JSON.parse(readFileSync(new URL(path, import.meta.url), 'utf8')) as { name: string, version: string }).version
    } catch {}
  }
  return 'unknown'
})()
