import { readFileSync } from 'node:fs'
import t from 'tap'
import { renderEnvExample, renderReadmeTable } from '../../src/config/docs.js'
import { properties } from '../../src/config/schema.js'

const root = new URL('../../', import.meta.url)

t.test('.env.example and the README table say what the schema says (npm run docs)', async (t) => {
  t.equal(readFileSync(new URL('.env.example', root), 'utf8'), renderEnvExample(), '.env.example is current')
  t.ok(readFileSync(new URL('README.md', root), 'utf8').includes(renderReadmeTable()), 'README table is current')
  for (const name of Object.keys(properties)) {
    t.match(renderEnvExample(), new RegExp(`^# ${name}=`, 'm'), name)
  }
})
