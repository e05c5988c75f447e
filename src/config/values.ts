import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { parseEnv } from 'node:util'
import type { VariableName } from './schema.js'
import { readSecretFileSync } from './secret-file.js'
import type { Config, CredentialSource } from './types.js'

/**
 * The form fields the sidecar sets itself: AUTH_TOKEN_PARAMS may not name
 * them (scope has its own variable, AUTH_SCOPE).
 */
export const RESERVED_PARAMS: ReadonlySet<string> = new Set([
  'grant_type', 'client_id', 'client_secret', 'username', 'password', 'refresh_token', 'scope',
  'client_assertion', 'client_assertion_type'
])

export type Raw = Partial<Record<VariableName, string | number | boolean>>

/**
 * AUTH_TOKEN_PARAMS as name/value pairs. Malformed text, a parameter without
 * a name, or one of the sidecar's own is a configuration error, named
 * without its value.
 */
export function tokenParams (value: string | undefined, problems: string[]): Array<[string, string]> {
  if (value === undefined) return []
  const pairs: Array<[string, string]> = []
  for (const part of value.split('&')) {
    if (part === '') continue
    const eq = part.indexOf('=')
    const [rawName, rawValue] = eq === -1 ? [part, ''] : [part.slice(0, eq), part.slice(eq + 1)]
    let name: string
    let decoded: string
    try {
      name = decodeURIComponent(rawName.replace(/\+/g, ' '))
      decoded = decodeURIComponent(rawValue.replace(/\+/g, ' '))
    } catch {
      problems.push('AUTH_TOKEN_PARAMS must be name=value pairs joined by &, percent-encoded (a stray % does not decode)')
      return []
    }
    if (name === '' || eq === -1) {
      problems.push('AUTH_TOKEN_PARAMS must be name=value pairs joined by &, e.g. audience=orders-api&resource=https%3A%2F%2Fapi.example.com')
      return []
    }
    if (RESERVED_PARAMS.has(name)) {
      problems.push(`AUTH_TOKEN_PARAMS may not set ${JSON.stringify(name.slice(0, 40))}: the sidecar sets it${name === 'scope' ? ' (use AUTH_SCOPE)' : ''}`)
      continue
    }
    pairs.push([name, decoded])
  }
  return pairs
}

export function egressProxy (env: Record<string, string>, problems: string[]): Config['egress'] {
  const pick = (name: string): string | undefined => {
    const set = env[name] !== undefined ? name : env[name.toLowerCase()] !== undefined ? name.toLowerCase() : undefined
    if (set === undefined) return undefined
    const value = env[set]!
    if (name === 'NO_PROXY') return value
    // a malformed proxy URL is named, never echoed: it may carry a password
    let url: URL | undefined
    try { url = new URL(value) } catch {}
    if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '' || !decodable(url.username) || !decodable(url.password)) {
      problems.push(`${set} must be a proxy URL such as http://host:3128 (credentials, if any, as http://user:password@host:3128)`)
      return undefined
    }
    return value
  }
  const httpProxy = pick('HTTP_PROXY')
  const httpsProxy = pick('HTTPS_PROXY')
  const noProxy = pick('NO_PROXY')
  return {
    ...(httpProxy !== undefined && { httpProxy }),
    ...(httpsProxy !== undefined && { httpsProxy }),
    ...(noProxy !== undefined && { noProxy })
  }
}

export function parseHttpUrl (name: VariableName, value: string | undefined, problems: string[], required: boolean): URL | undefined {
  if (value === undefined) {
    if (required) problems.push(`${name} is required`)
    return undefined
  }
  let url: URL
  try {
    url = new URL(value)
  } catch {
    problems.push(`${name} must be an absolute http or https URL`)
    return undefined
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    problems.push(`${name} must be an absolute http or https URL`)
    return undefined
  }
  if (url.username !== '' || url.password !== '') {
    problems.push(`${name} must not carry credentials`)
    return undefined
  }
  if (url.search !== '' || url.hash !== '') {
    problems.push(`${name} must not have a query or fragment`)
    return undefined
  }
  return url
}

export function credentialSource (
  name: VariableName, fileName: VariableName, raw: Raw, cwd: string, problems: string[], required: boolean
): CredentialSource | undefined {
  const value = raw[name]
  const file = raw[fileName]
  if (value !== undefined && file !== undefined) {
    problems.push(`${name} and ${fileName} are both set; use one`)
    return undefined
  }
  if (file !== undefined) {
    const path = resolve(cwd, String(file))
    try {
      if (readSecretFileSync(path) === '') problems.push(`${fileName} names an empty file`)
    } catch (err) {
      problems.push(`${fileName} ${(err as Error).message}`)
    }
    return { variable: name, file: path }
  }
  if (value !== undefined) return { variable: name, value: String(value) }
  if (required) problems.push(`${name} (or ${fileName}) is required`)
  return undefined
}

/** Whether a URL's user or password decodes (a stray `%` would throw wherever it is used). */
function decodable (part: string): boolean {
  try {
    decodeURIComponent(part)
    return true
  } catch {
    return false
  }
}

export interface SchemaError {
  instancePath: string
  keyword: string
  message?: string
  params?: { allowedValues?: unknown[], limit?: number, type?: string }
}

/** The validator's complaint in plain words. */
export function plainWords (e: SchemaError): string {
  switch (e.keyword) {
    case 'type': return e.params?.type === 'integer' ? 'must be a whole number' : e.params?.type === 'boolean' ? 'must be true or false' : `must be a ${e.params?.type ?? 'value of another type'}`
    case 'minimum': return `must be at least ${e.params?.limit}`
    case 'maximum': return `must be at most ${e.params?.limit}`
    case 'enum': return `must be one of ${(e.params?.allowedValues ?? []).join(', ')}`
    default: return e.message ?? 'is invalid'
  }
}

/** `.env` as name → value; none when the file does not exist. */
export function readDotenv (path: string, problems: string[]): Record<string, string> {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code !== 'ENOENT') problems.push(`.env could not be read (${code ?? 'error'})`)
    return {}
  }
  return parseEnv(text) as Record<string, string>
}
