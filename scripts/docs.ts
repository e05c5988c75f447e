// `npm run docs`: rewrites .env.example and the README's configuration table from the schema.
import { readFileSync, writeFileSync } from 'node:fs'
import { renderEnvExample, renderReadmeTable } from '../src/config/docs.js'

writeFileSync('.env.example', renderEnvExample())
const readme = readFileSync('README.md', 'utf8')
const start = readme.indexOf('<!-- config:start -->')
const end = readme.indexOf('<!-- config:end -->')
if (start === -1 || end === -1) throw new Error('README.md lacks the config markers')
writeFileSync('README.md', `${readme.slice(0, start)}<!-- config:start -->\n${renderReadmeTable()}\n${readme.slice(end)}`)
