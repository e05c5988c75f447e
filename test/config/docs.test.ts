import { readFileSync } from 'node:fs'
import t from 'tap'
import { renderConfigTable, renderEnvExample, renderRouteTable } from '../../src/config/docs.js'
import { loadConfig } from '../../src/config/load.js'
import { properties } from '../../src/config/schema.js'

const root = new URL('../../', import.meta.url)

t.test('.env.example and the tables of the docs say what the schema says (npm run docs)', async (t) => {
  t.equal(readFileSync(new URL('.env.example', root), 'utf8'), renderEnvExample(), '.env.example is current')
  const configuration = readFileSync(new URL('docs/configuration.md', root), 'utf8')
  t.ok(configuration.includes(renderConfigTable()), 'the table of variables in docs/configuration.md is current')
  t.ok(configuration.includes(renderRouteTable()), 'and so is its table of route settings')
  t.ok(readFileSync(new URL('docs/routes.md', root), 'utf8').includes(renderRouteTable()), 'and the one in docs/routes.md')
  for (const name of Object.keys(properties)) {
    t.match(renderEnvExample(), new RegExp(`^# ${name}=`, 'm'), name)
  }
})

t.test('the example route of .env.example is a valid configuration', async (t) => {
  const example = Object.fromEntries([...renderEnvExample().matchAll(/^# (ROUTE_[A-Z_]+)=(.+)$/gm)].map((m) => [m[1]!, m[2]!]))
  t.ok(Object.keys(example).length >= 3, 'it has one')
  const config = loadConfig({ BASE_URL: 'https://orders.example.com', AUTH_URL: 'https://sso.example.com', AUTH_CLIENT_ID: 'c', AUTH_USERNAME: 'u', AUTH_PASSWORD: 'p', ...example }, { cwd: '/nonexistent' })
  t.match(config.routes.map((r) => r.name), ['default', 'reports'])
})
