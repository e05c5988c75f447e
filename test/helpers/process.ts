import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { fileURLToPath } from 'node:url'
import type { Test } from 'tap'
import { TokenServer, type TokenServerOptions } from '../../dev/token-server.js'
import { send, until } from './build.js'
import { FakeUpstream } from './upstream.js'

export const root = fileURLToPath(new URL('../..', import.meta.url))
export const main = `${root}dist/main.js`

/**
 * Runs TypeScript from the repository in a child process of its own (for
 * process-wide state: V8 flags, exit handlers), from the repository's root:
 * `node [nodeArgs] --import tsx args`. Resolves with its
 * exit code and stdout, whatever the code.
 */
export async function runTs (args: string[], nodeArgs: string[] = []): Promise<{ code: number, stdout: string }> {
  return await new Promise((resolve, reject) => {
    execFile(process.execPath, [...nodeArgs, '--import=tsx', ...args], { cwd: root }, (err, stdout) => {
      if (err !== null && typeof err.code !== 'number') reject(err)
      else resolve({ code: err === null ? 0 : err.code as number, stdout })
    })
  })
}

export async function freePort (): Promise<number> {
  return await new Promise((resolve) => {
    const s = createServer()
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number }
      s.close(() => resolve(port))
    })
  })
}

/** The Node options the image starts the sidecar with: its Dockerfile's ENTRYPOINT, between node and dist/main.js. */
export function imageNodeArgs (): string[] {
  const entrypoint = /^ENTRYPOINT (\[.*\])$/m.exec(readFileSync(`${root}Dockerfile`, 'utf8'))
  if (entrypoint === null) throw new Error('no ENTRYPOINT in the Dockerfile')
  const command = JSON.parse(entrypoint[1]!) as string[]
  return command.slice(1, command.indexOf('dist/main.js'))
}

export interface Running {
  child: ChildProcess
  stdout: string[]
  stderr: string[]
  exited: Promise<number | null>
}

/** How the built product is started. */
export interface Launch {
  /** options for node itself, before dist/main.js */
  nodeArgs?: string[]
  /**
   * Without the hooks tap puts into every node child process (its
   * NODE_OPTIONS loads @tapjs/processinfo, whose loader thread alone adds
   * some 80 MB of RSS): for measuring the product's memory as it runs.
   */
  untracked?: boolean
  /** another entry point than the repository's dist/main.js (a copy of dist/, say) */
  entry?: string
}

/** Runs the built product (`node [nodeArgs] dist/main.js [args]`) with exactly `env` (and PATH). */
export function start (env: Record<string, string>, cwd = root, args: string[] = [], launch: Launch = {}): Running {
  const entry = launch.entry ?? main
  if (!existsSync(entry)) throw new Error(`${entry} is missing: run \`npm run build\` first (npm test does)`)
  const command = [process.execPath, ...(launch.nodeArgs ?? []), entry, ...args]
  // env(1) execs node in its own place: the child's pid is node's
  if (launch.untracked === true) command.unshift('env', '-u', 'NODE_OPTIONS')
  const child = spawn(command[0]!, command.slice(1), {
    cwd,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  const stdout: string[] = []
  const stderr: string[] = []
  let partial = ''
  child.stdout!.on('data', (c: Buffer) => {
    const text = partial + c.toString()
    const lines = text.split('\n')
    partial = lines.pop()!
    stdout.push(...lines)
  })
  child.stderr!.on('data', (c: Buffer) => stderr.push(c.toString()))
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  return { child, stdout, stderr, exited }
}


/** Resident and peak resident memory of a process, in MB, from /proc. */
export function memoryOf (pid: number): { rssMb: number, peakMb: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const kb = (field: string): number => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? NaN)
  return { rssMb: kb('VmRSS') / 1024, peakMb: kb('VmHWM') / 1024 }
}

export interface RunningSidecar {
  run: Running
  proxyUrl: string
  adminUrl: string
  routeUrls: Record<string, string>
  tokenServer: TokenServer
  upstream: FakeUpstream
}

/** The service user's password in startSidecar's token server. */
export const E2E_PASSWORD = 'e2e-password-5d4c3b'

export interface SpawnedSidecar {
  run: Running
  proxyUrl: string
  adminUrl: string
  /** the routes with a port of their own, by name */
  routeUrls: Record<string, string>
}

/**
 * `node dist/main.js` in front of `baseUrl`, against the auth server at
 * `authUrl` as client legacy-app and user service-user, listening when this
 * resolves; killed in teardown. `env` adds or overrides variables. The ports
 * are the kernel's choice (port 0), read from the log line: a port picked
 * here and bound there could be taken meanwhile by a parallel test.
 */
export async function spawnSidecar (t: Test, baseUrl: string, authUrl: string, password: string, env: Record<string, string> = {}, launch: Launch = {}): Promise<SpawnedSidecar> {
  const run = start({
    BASE_URL: baseUrl,
    AUTH_URL: authUrl,
    AUTH_CLIENT_ID: 'legacy-app',
    AUTH_USERNAME: 'service-user',
    AUTH_PASSWORD: password,
    PROXY_PORT: '0',
    ADMIN_PORT: '0',
    ADMIN_HOST: '127.0.0.1',
    ...env
  }, root, [], launch)
  t.teardown(() => { run.child.kill('SIGKILL') })
  const listening = await listeningLine(run)
  const routeUrls = Object.fromEntries(Object.entries(listening.routes ?? {}).flatMap(([name, r]) => r.listen === undefined ? [] : [[name, urlOf(r.listen)]]))
  return { run, proxyUrl: urlOf(listening.proxy), adminUrl: urlOf(listening.admin), routeUrls }
}

/** The sidecar's "listening" record, or an error with its output when it exits or stays silent. */
async function listeningLine (run: Running, ms = 15_000): Promise<{ proxy: string, admin: string, routes?: Record<string, { listen?: string }> }> {
  let exited = false
  void run.exited.then(() => { exited = true })
  const find = (): string | undefined => run.stdout.find((l) => l.includes('auth-sidecar listening'))
  await until(() => find() !== undefined || exited, ms).catch(() => {})
  const line = find()
  if (line === undefined) {
    const why = exited ? `exited with ${String(run.child.exitCode)}` : `not listening after ${ms} ms`
    throw new Error(`sidecar ${why}: ${run.stdout.join('\n')} ${run.stderr.join('')}`)
  }
  return JSON.parse(line) as { proxy: string, admin: string, routes?: Record<string, { listen?: string }> }
}

/** A URL on this machine for a logged listening address (`host:port`, IPv6 too). */
function urlOf (address: string): string {
  const at = address.lastIndexOf(':')
  const host = address.slice(0, at)
  const port = address.slice(at + 1)
  if (host === '0.0.0.0' || host === '::') return `http://127.0.0.1:${port}`
  return host.includes(':') ? `http://[${host}]:${port}` : `http://${host}:${port}`
}

/** Waits for the sidecar's first token, with its output in the error if it never comes. */
export async function untilToken (run: Running, ms = 15_000): Promise<void> {
  await until(() => run.stdout.some((l) => l.includes('"token obtained')), ms).catch((err: Error) => {
    throw new Error(`${err.message}: ${run.stdout.join('\n')} ${run.stderr.join('')}`)
  })
}

/**
 * The built product as a child process, in front of a FakeUpstream and a
 * TokenServer in this process; ready (a token held) when this resolves.
 */
export async function startSidecar (t: Test, env: Record<string, string> = {}, tokenOptions: TokenServerOptions = {}, waitReady = true, launch: Launch = {}): Promise<RunningSidecar> {
  const { tokenServer, upstream } = await fakeServers(t, tokenOptions)
  const sidecar = await spawnSidecar(t, `${upstream.url}/api`, tokenServer.url, E2E_PASSWORD, env, launch)
  if (waitReady) await untilReady(sidecar)
  return { ...sidecar, tokenServer, upstream }
}

/** A TokenServer knowing the service user (E2E_PASSWORD), and a FakeUpstream checking its tokens; closed in teardown. */
export async function fakeServers (t: Test, tokenOptions: TokenServerOptions = {}): Promise<{ tokenServer: TokenServer, upstream: FakeUpstream }> {
  const tokenServer = new TokenServer({ users: { 'service-user': E2E_PASSWORD }, ...tokenOptions })
  await tokenServer.listen()
  const upstream = new FakeUpstream(tokenServer)
  await upstream.listen()
  t.teardown(async () => {
    await upstream.close()
    await tokenServer.close()
  })
  return { tokenServer, upstream }
}

/** Waits for a spawned sidecar to hold a token and answer /readyz 200. */
export async function untilReady (s: SpawnedSidecar, ms = 10_000): Promise<void> {
  await untilToken(s.run)
  // every route's credential: the first token is one of them
  const deadline = Date.now() + ms
  for (;;) {
    const ready = await send(`${s.adminUrl}/readyz`)
    if (ready.status === 200) return
    if (Date.now() > deadline) throw new Error(`sidecar not ready: ${ready.body}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

/**
 * Steady traffic through a spawned sidecar: a GET of `path` every 200 ms
 * (after each answer) for `seconds`; `during` runs after each one with the
 * time elapsed. Resolves with the statuses, in order.
 */
export async function traffic (s: SpawnedSidecar, seconds: number, options: { path?: string, during?: (elapsedMs: number) => Promise<void> } = {}): Promise<number[]> {
  const statuses: number[] = []
  const started = Date.now()
  while (Date.now() - started < seconds * 1000) {
    statuses.push((await send(`${s.proxyUrl}${options.path ?? '/r'}`)).status)
    await options.during?.(Date.now() - started)
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  return statuses
}
