import { readFileSync } from 'node:fs'

/**
 * The package's version, read from package.json beside `src/` or `dist/`
 * (the image copies package.json next to dist/).
 */
export const VERSION: string = (() => {
  try {
    return (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version
  } catch {
    return 'unknown'
  }
})()
