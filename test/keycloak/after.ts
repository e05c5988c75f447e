// tap's `after`: stops the Keycloak that before.mjs started for this run.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { runDir } from './run-dir.js'

let pid: number | undefined
try { pid = Number(readFileSync(join(runDir, 'supervisor.pid'), 'utf8')) } catch {}
if (pid !== undefined) {
  try { process.kill(pid, 'SIGTERM') } catch {}
  for (let i = 0; i < 50; i++) {
    try { process.kill(pid, 0) } catch { break }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}
