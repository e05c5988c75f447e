import { ROUTE_SETTING_DESCRIPTIONS } from './routes.js'
import { properties } from './schema.js'

type Prop = { description: string, default?: string | number, secret?: boolean, required?: true }

const shownDefault = (p: Prop): string | undefined => p.default === undefined ? (p.required ? 'required' : undefined) : String(p.default)

/** `.env.example`, rendered from the schema so that names, defaults and meanings cannot drift. */
export function renderEnvExample (): string {
  const lines = [
    '# auth-sidecar configuration. Copy to .env (read from the working directory;',
    '# the environment wins over it). Generated from src/config/schema.ts:',
    '# `npm run docs` rewrites this file and the tables in docs/configuration.md',
    '# and docs/routes.md.',
    '#',
    '# Also honoured: HTTPS_PROXY, HTTP_PROXY, NO_PROXY (egress proxy, any case)',
    '# and NODE_EXTRA_CA_CERTS (extra trusted CAs).',
    '#',
    '# CONFIG_FILE names a YAML (or JSON) file holding these settings by the same',
    '# names, named routes as a map under routes: (docs/config-file.md). The',
    '# environment wins over it, it over this file; it is re-read when it changes',
    '# and on SIGHUP, and applied without a restart.',
    '# CONFIG_FILE=',
    ''
  ]
  for (const [name, p] of Object.entries(properties) as Array<[string, Prop]>) {
    lines.push(`# ${p.description}${p.default === undefined ? (p.required ? ' (required)' : '') : ` (default: ${p.default})`}`)
    lines.push(p.default === undefined ? `# ${name}=` : `# ${name}=${p.default}`)
    lines.push('')
  }
  lines.push(
    '# Named routes: more APIs from the same sidecar (docs/routes.md). Each is a',
    '# set of ROUTE_<NAME>_<SETTING> variables, NAME of letters, digits and _:',
    ...Object.entries(ROUTE_SETTING_DESCRIPTIONS).map(([setting, description]) => `#   ${setting.padEnd(22)} ${description}`),
    '# For example, an API that wants a token for its own audience, exchanged from',
    '# the default route\'s:',
    '# ROUTE_REPORTS_BASE_URL=https://reports.example.com',
    '# ROUTE_REPORTS_PATH=/reports',
    '# ROUTE_REPORTS_AUTH_EXCHANGE_AUDIENCE=reports-api',
    ''
  )
  return lines.join('\n')
}

/** The table of every variable, for docs/configuration.md. */
export function renderConfigTable (): string {
  const rows = ['| variable | default | meaning |', '|---|---|---|']
  for (const [name, p] of Object.entries(properties) as Array<[string, Prop]>) {
    const shown = shownDefault(p)
    rows.push(`| \`${name}\` | ${shown === undefined ? 'none' : p.default === undefined ? shown : `\`${shown}\``} | ${p.description} |`)
  }
  return rows.join('\n')
}

/** The named routes' settings, for docs/routes.md and docs/configuration.md. */
export function renderRouteTable (): string {
  return ['| `ROUTE_<NAME>_` | meaning |', '|---|---|', ...Object.entries(ROUTE_SETTING_DESCRIPTIONS).map(([setting, description]) => `| \`${setting}\` | ${description} |`)].join('\n')
}
