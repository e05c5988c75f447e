// Where one test run's Keycloak writes its state and logs: one per checkout.
import { createHash } from 'node:crypto'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

export const root = fileURLToPath(new URL('../..', import.meta.url))
export const runDir = join(tmpdir(), `auth-sidecar-keycloak-${createHash('sha256').update(root).digest('hex').slice(0, 12)}`)
