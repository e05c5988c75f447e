// `npm run docs`: rewrites .env.example and the README's tables of variables from the schema.
import { readFileSync, writeFileSync } from 'node:fs'
import { renderEnvExample, renderReadmeTable, renderRouteTable } from '../src/config/docs.js'

writeFileSync('.env.example', renderEnvExample())
/** The README's text between `<!-- name:start -->` and `<!-- name:end -->`, replaced. */
function between (readme: string, name: string, table: string): string {
  const start = readme.indexOf(`<!-- ${name}:start -->`)
  const end = readme.indexOf(`<!-- ${name}:end -->`)
  if (start === -1 || end === -1) throw new Error(`README.md lacks the ${name} markers`)
  return `${readme.slice(0, start)}<!-- ${name}:start -->\n${table}\n${readme.slice(end)}`
}

writeFileSync('README.md', between(between(readFileSync('README.md', 'utf8'), 'config', renderReadmeTable()), 'routes', renderRouteTable()))
