import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { parse } from 'yaml'
import { CHECK_EXIT, runCheck } from '../../src/check/run.js'
import { loadConfig, readConfiguration, type Config } from '../../src/config/load.js'
import { ConfigError } from '../../src/errors.js'

const dir = mkdtempSync(join(tmpdir(), 'config-file-'))
let written = 0

/** `text` as a new file in the test's directory; its path. */
function file (text: string | Buffer, name = `config-${++written}.yaml`): string {
  const path = join(dir, name)
  writeFileSync(path, text)
  return path
}

const BASE = `
BASE_URL: https://orders.internal/v1
AUTH_URL: https://sso.internal
AUTH_CLIENT_ID: legacy-app
AUTH_USERNAME: svc
AUTH_PASSWORD: file-password-7c1d
`

function load (env: Record<string, string>, cwd = '/nonexistent'): Config {
  return loadConfig(env, { cwd, parseYaml: parse })
}

function problems (env: Record<string, string>): readonly string[] {
  try {
    load(env)
  } catch (err) {
    if (err instanceof ConfigError) return err.problems
    throw err
  }
  return []
}

t.test('the file holds the settings by their variables\' names, routes as a map, a list where a variable takes a comma list', async (t) => {
  const path = file(`${BASE.replace('https://orders', 'http://orders')}
UPSTREAM_TIMEOUT_MS: 2500
ACCESS_LOG: false
FORWARD_PROXY_PORT: 0
FORWARD_PROXY_ALLOW: [pypi.org, "*.github.com"]
routes:
  reports:
    BASE_URL: http://reports.internal
    PATH: /reports
    AUTH_CLIENT_ID: reports-app
  Billing_EU:
    BASE_URL: http://billing.internal
    PORT: 0
`)
  const config = load({ CONFIG_FILE: path })
  t.equal(config.routes[0]!.origin, 'http://orders.internal')
  t.equal(config.upstream.timeoutMs, 2500, 'a number')
  t.equal(config.accessLog, false, 'a boolean')
  t.same(config.forward?.allow.map((p) => p.host), ['pypi.org', 'github.com'], 'a list')
  t.same(config.routes.map((r) => r.name), ['default', 'billing_eu', 'reports'], 'routes by name, lower case as variables\' names are')
  const reports = config.routes.find((r) => r.name === 'reports')!
  t.equal(reports.path, '/reports')
  t.equal(reports.credential.auth.mode === 'oauth2' && reports.credential.auth.clientId, 'reports-app', 'a route\'s AUTH_ setting over the default route\'s')
  t.equal(config.routes.find((r) => r.name === 'billing_eu')!.port, 0)
  t.same(config.file, { path, overridden: [] })
})

t.test('JSON is read too', async (t) => {
  const path = file(JSON.stringify({ BASE_URL: 'http://api.internal', AUTH_MODE: 'basic', AUTH_USERNAME: 'u', AUTH_PASSWORD: 'p', routes: { b: { BASE_URL: 'http://b.internal', PATH: '/b', AUTH_USERNAME: 'u2', AUTH_PASSWORD: 'p2' } } }), 'config.json')
  t.same(load({ CONFIG_FILE: path }).routes.map((r) => r.origin), ['http://api.internal', 'http://b.internal'])
})

t.test('the environment wins over the file, the file over .env; what the environment overrides is said', async (t) => {
  const cwd = mkdtempSync(join(tmpdir(), 'config-file-cwd-'))
  const path = file(`${BASE}
UPSTREAM_TIMEOUT_MS: 2500
TOKEN_WAIT_MS: 700
routes:
  reports: { BASE_URL: "https://reports.internal", PATH: /reports }
`)
  writeFileSync(join(cwd, '.env'), `CONFIG_FILE=${path}\nTOKEN_WAIT_MS=900\nTOKEN_TIMEOUT_MS=1234\n`)
  const config = load({ UPSTREAM_TIMEOUT_MS: '4000', ROUTE_REPORTS_PATH: '/r' }, cwd)
  t.equal(config.upstream.timeoutMs, 4000, 'the environment over the file')
  t.equal(config.token.waitMs, 700, 'the file over .env')
  t.equal(config.token.timeoutMs, 1234, '.env where neither sets it')
  t.equal(config.routes.find((r) => r.name === 'reports')!.path, '/r', 'a route\'s setting too')
  t.same(config.file?.overridden, ['ROUTE_REPORTS_PATH', 'UPSTREAM_TIMEOUT_MS'])
  t.equal((await readConfiguration({}, { cwd })).file?.path, path, 'readConfiguration finds CONFIG_FILE in .env and loads the parser')
})

t.test('a key the sidecar does not know is an error naming it, at the top and under a route', async (t) => {
  const said = problems({ CONFIG_FILE: file(`${BASE}
UPSTREAM_TIMEOUT: 2500
CONFIG_FILE: /etc/other.yaml
ROUTE_X_BASE_URL: http://x.internal
routes:
  reports:
    BASE_ULR: https://reports.internal
    PATH: /reports
  "bad name": { BASE_URL: http://y.internal, PATH: /y }
`) })
  t.match(said.join('\n'), /UPSTREAM_TIMEOUT is not a setting of auth-sidecar; did you mean UPSTREAM_TIMEOUT_MS\?/)
  t.match(said.join('\n'), /CONFIG_FILE is set in the environment only/)
  t.match(said.join('\n'), /ROUTE_X_BASE_URL: routes go under routes:/)
  t.match(said.join('\n'), /routes\.reports\.BASE_ULR is not a route setting; did you mean BASE_URL\?/)
  t.match(said.join('\n'), /a route's name is letters, digits and _, at most 64 \(line \d+\)/)
  t.equal(said.filter((p) => p.startsWith('CONFIG_FILE ')).length, 5, 'each names the file')
})

t.test('a file that is not YAML, not a map, or missing is named, never quoted', async (t) => {
  const broken = problems({ CONFIG_FILE: file(`${BASE}\nAUTH_CLIENT_SECRET: "broken-secret-4e2f\n  : : [`) })
  t.match(broken.join('\n'), /is not YAML or JSON \(line \d+\)/)
  t.notMatch(broken.join('\n'), /broken-secret-4e2f|file-password-7c1d/, 'no value in the message')
  t.match(problems({ CONFIG_FILE: file('- BASE_URL\n- AUTH_URL\n') }).join('\n'), /must be a map of settings/)
  t.match(problems({ CONFIG_FILE: join(dir, 'absent.yaml') }).join('\n'), /absent\.yaml: cannot be read \(ENOENT\)/)
  // a secret indented one line too far is a key: only its line is said
  const misplaced = problems({ CONFIG_FILE: file(`${BASE}\nAUTH_CLIENT_SECRET:\na9Fk2LmQ7xTzR4pW8nB3vC6yH1jD5sE0: x\nroutes:\n  "r hunter2-9a8b": {}\n  r: { BASE_URL: http://r.internal, PATH: /r, Zq8Wk2LmQ7xTzR4pW8nB3vC6yH1jD5sE: x }\n`) })
  t.match(misplaced.join('\n'), /line 9: a key that is not a setting of auth-sidecar/)
  t.match(misplaced.join('\n'), /routes\.r: line 12: a key that is not a route setting/)
  t.match(misplaced.join('\n'), /a route's name is letters, digits and _, at most 64 \(line 11\)/)
  t.notMatch(misplaced.join('\n'), /hunter2|a9Fk2LmQ|Zq8Wk2/, 'none of them repeated')
  t.match(problems({ CONFIG_FILE: file(`${BASE}# ${'x'.repeat(256 * 1024)}\n`) }).join('\n'), /is larger than 256 KiB/)
  t.match(problems({ CONFIG_FILE: file(`${BASE}BASE_URL: ${'['.repeat(10_000)}${']'.repeat(10_000)}\n`) }).join('\n'), /nests lists or maps deeper than 64/, 'refused before it is parsed')
  t.match(problems({ CONFIG_FILE: file(Buffer.concat([Buffer.from(`${BASE}AUTH_SCOPE: "Passw`), Buffer.from([0xf6]), Buffer.from('rd"\n')])) }).join('\n'), /is not UTF-8 text/)
  t.match(problems({ CONFIG_FILE: file(`${BASE}\nUPSTREAM_TIMEOUT_MS: {a: 1}\n`) }).join('\n'), /UPSTREAM_TIMEOUT_MS must be a value or a list of values/)
  const bad = problems({ CONFIG_FILE: file(`${BASE}\nUPSTREAM_TIMEOUT_MS: soon\nAUTH_PASSWORD_FILE: ${join(dir, 'no-such-secret')}\n`) })
  t.match(bad.join('\n'), /UPSTREAM_TIMEOUT_MS/, 'a bad value, named as a variable\'s is')
})

t.test('check checks the file: a key it does not know fails the configuration step; the file and what the environment overrides are said', async (t) => {
  const typo = file(`${BASE}\nroutes:\n  reports: { BASE_URL: http://127.0.0.1:9, PTH: /reports }\n`)
  let out = ''
  t.equal(await runCheck({ CONFIG_FILE: typo }, [], (text) => { out += text }, '/nonexistent'), CHECK_EXIT.configuration, 'the configuration step\'s exit code')
  t.match(out, `FAIL configuration: CONFIG_FILE ${typo}: routes.reports.PTH is not a route setting; did you mean PATH?`)
  const good = file('BASE_URL: http://127.0.0.1:9/v1\nAUTH_MODE: basic\nAUTH_USERNAME: svc\nAUTH_PASSWORD: basic-secret-55aa\nUPSTREAM_TIMEOUT_MS: 500\n')
  out = ''
  await runCheck({ CONFIG_FILE: good, AUTH_USERNAME: 'svc2' }, [], (text) => { out += text }, '/nonexistent')
  t.match(out, `file: ${good}; the environment overrides its AUTH_USERNAME`)
  t.notMatch(out, /basic-secret-55aa/)
})
