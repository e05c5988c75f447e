// tap's `before`: starts the real Keycloak for this test run in the
// background (scripts/keycloak.mjs serve) and returns at once, so that the
// other tests run while it boots. It stops when tap's `after` says so, or
// when the tap process that started it is gone. KEYCLOAK_TESTS=off starts
// nothing; the Keycloak tests then skip, or fail under CI=true.
import { spawn } from 'node:child_process'
import { mkdirSync, openSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { root, runDir } from './run-dir.js'

rmSync(runDir, { recursive: true, force: true })
mkdirSync(runDir, { recursive: true })
if (process.env.KEYCLOAK_TESTS === 'off') {
  writeFileSync(join(runDir, 'state.json'), JSON.stringify({ status: 'off', reason: 'KEYCLOAK_TESTS=off in the environment' }))
} else {
  const log = openSync(join(runDir, 'supervisor.log'), 'w')
  const child = spawn(process.execPath, [join(root, 'scripts/keycloak.mjs'), 'serve', runDir, String(process.ppid)], {
    cwd: root, detached: true, stdio: ['ignore', log, log]
  })
  writeFileSync(join(runDir, 'supervisor.pid'), String(child.pid))
  child.unref()
}
