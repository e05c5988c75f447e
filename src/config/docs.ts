import { properties } from './schema.js'

type Prop = { description: string, default?: string | number, secret?: boolean, required?: true }

const shownDefault = (p: Prop): string | undefined => p.default === undefined ? (p.required ? 'required' : undefined) : String(p.default)

/** `.env.example`, rendered from the schema so that names, defaults and meanings cannot drift. */
export function renderEnvExample (): string {
  const lines = [
    '# auth-sidecar configuration. Copy to .env (read from the working directory;',
    '# the environment wins over it). Generated from src/config/schema.ts:',
    '# `npm run docs` rewrites this file and the table in README.md.',
    '#',
    '# Also honoured: HTTPS_PROXY, HTTP_PROXY, NO_PROXY (egress proxy, any case)',
    '# and NODE_EXTRA_CA_CERTS (extra trusted CAs).',
    ''
  ]
  for (const [name, p] of Object.entries(properties) as Array<[string, Prop]>) {
    lines.push(`# ${p.description}${p.default === undefined ? (p.required ? ' (required)' : '') : ` (default: ${p.default})`}`)
    lines.push(p.default === undefined ? `# ${name}=` : `# ${name}=${p.default}`)
    lines.push('')
  }
  return lines.join('\n')
}

/** The configuration table of README.md. */
export function renderReadmeTable (): string {
  const rows = ['| variable | default | meaning |', '|---|---|---|']
  for (const [name, p] of Object.entries(properties) as Array<[string, Prop]>) {
    const shown = shownDefault(p)
    rows.push(`| \`${name}\` | ${shown === undefined ? 'none' : p.default === undefined ? shown : `\`${shown}\``} | ${p.description} |`)
  }
  return rows.join('\n')
}
