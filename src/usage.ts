import { ROUTE_SETTING_DESCRIPTIONS } from './config/routes.js'
import { properties } from './config/schema.js'
import { VERSION } from './version.js'

type Prop = { description: string, default?: string | number | boolean, required?: true }

/** `--help`: what the sidecar does, its commands and every variable; nothing is read or sent. */
export function usage (): string {
  const rows = (Object.entries(properties) as Array<[string, Prop]>).map(([name, p]) => {
    const shown = p.default !== undefined ? `(default ${String(p.default)})` : p.required ? '(required)' : ''
    return `  ${name.padEnd(26)} ${p.description} ${shown}`.trimEnd()
  })
  const routeRows = Object.entries(ROUTE_SETTING_DESCRIPTIONS).map(([setting, description]) => `  ROUTE_<NAME>_${setting.padEnd(22)} ${description}`)
  return `auth-sidecar ${VERSION}: an authenticating reverse proxy. It keeps an OAuth 2.0
access token fresh against a Keycloak token endpoint and forwards every request
it receives to BASE_URL with "Authorization: Bearer <token>".

Usage:
  node dist/main.js              run the sidecar (configuration from the environment and ./.env)
  node dist/main.js check        try the configuration once: discovery, a grant, a request
                                 to the upstream, the session ended (see check --help)
  node dist/main.js inject       a Kubernetes admission webhook that adds the sidecar to
                                 annotated pods (see inject --help)
  node dist/main.js --help, -h   this text
  node dist/main.js --version    the version

Configuration (environment variables; ./.env is read too, the environment wins,
an empty value means unset; *_FILE variants read a value from a file):
${rows.join('\n')}
  HTTPS_PROXY, HTTP_PROXY, NO_PROXY   egress proxy for the upstream and the auth server
  NODE_EXTRA_CA_CERTS                 extra trusted CAs (from the environment only)
  CONFIG_FILE                         a YAML or JSON file with these settings by the same names,
                                      routes under routes:; the environment wins over it, it
                                      over ./.env; re-read on change and SIGHUP, applied live

Named routes: more APIs from the same sidecar, each ROUTE_<NAME>_<SETTING>
(NAME of letters, digits and _); the variables above are the default route's:
${routeRows.join('\n')}

More: README.md (quick start, guides), docs/configuration.md, docs/behaviour.md
(troubleshooting), .env.example.
`
}
