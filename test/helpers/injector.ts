import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Test } from 'tap'
import { until } from './build.js'
import { TestCa, type Issued } from './certificates.js'
import { start, type Running } from './process.js'

export const INJECTED_IMAGE = 'registry.example.com/platform/auth-sidecar:0.1.0'

export interface RunningInjector {
  run: Running
  /** https://127.0.0.1:<port> */
  url: string
  /** the CA's certificate (PEM) that signed the serving certificate */
  ca: string
  caAuthority: TestCa
  serving: Issued
  dir: string
}

/**
 * `node dist/main.js inject` on a port of the kernel's choice, with a
 * serving certificate for 127.0.0.1 made now by a CA of the test's own;
 * listening when this resolves, killed in teardown.
 */
export async function startInjector (t: Test, env: Record<string, string> = {}): Promise<RunningInjector> {
  const dir = mkdtempSync(join(tmpdir(), 'auth-sidecar-inject-'))
  const caAuthority = TestCa.create(join(dir, 'ca'), 'injector test CA')
  const serving = caAuthority.issue('serving', { cn: 'auth-sidecar-injector.auth-sidecar.svc', san: 'IP:127.0.0.1,DNS:localhost' })
  const run = start({ INJECT_HOST: '127.0.0.1', INJECT_PORT: '0', INJECT_TLS_CERT_FILE: serving.certFile, INJECT_TLS_KEY_FILE: serving.keyFile, INJECT_IMAGE: INJECTED_IMAGE, ...env }, undefined, ['inject'])
  t.teardown(() => {
    run.child.kill('SIGKILL')
    rmSync(dir, { recursive: true, force: true })
  })
  const line = await logLine(run, 'auth-sidecar inject listening')
  const listen = (line.listen as string)
  const { readFileSync } = await import('node:fs')
  return { run, url: `https://127.0.0.1:${listen.slice(listen.lastIndexOf(':') + 1)}`, ca: readFileSync(caAuthority.caFile, 'utf8'), caAuthority, serving, dir }
}

/** The first log line with `msg`, parsed; an error with the output when the process exits or it does not come. */
export async function logLine (run: Running, msg: string, ms = 15_000, after = 0): Promise<Record<string, unknown>> {
  let exited = false
  void run.exited.then(() => { exited = true })
  const find = (): string | undefined => run.stdout.slice(after).find((l) => l.includes(`"msg":"${msg}`))
  await until(() => find() !== undefined || exited, ms).catch(() => {})
  const line = find()
  if (line === undefined) throw new Error(`no "${msg}" (${exited ? `exited with ${String(run.child.exitCode)}` : 'timed out'}): ${run.stdout.join('\n')} ${run.stderr.join('')}`)
  return JSON.parse(line) as Record<string, unknown>
}
