// `npm run docs`: rewrites .env.example, and the generated tables of the docs
// pages, from the schema.
import { readFileSync, writeFileSync } from 'node:fs'
import { renderConfigTable, renderEnvExample, renderRouteTable } from '../src/config/docs.js'

/** Each page, and the tables it holds between `<!-- name:start -->` and `<!-- name:end -->`. */
const GENERATED: Record<string, Record<string, () => string>> = {
  'docs/configuration.md': { config: renderConfigTable, routes: renderRouteTable },
  'docs/routes.md': { routes: renderRouteTable }
}

/** `text` with what lies between the markers of `name` replaced by `table`. */
function between (file: string, text: string, name: string, table: string): string {
  const start = text.indexOf(`<!-- ${name}:start -->`)
  const end = text.indexOf(`<!-- ${name}:end -->`)
  if (start === -1 || end === -1) throw new Error(`${file} lacks the ${name} markers`)
  return `${text.slice(0, start)}<!-- ${name}:start -->\n${table}\n${text.slice(end)}`
}

writeFileSync('.env.example', renderEnvExample())
for (const [file, tables] of Object.entries(GENERATED)) {
  let text = readFileSync(file, 'utf8')
  for (const [name, render] of Object.entries(tables)) text = between(file, text, name, render())
  writeFileSync(file, text)
}
