// A real Zipkin server for the tracing test: its executable jar from Maven
// Central (io.zipkin:zipkin-server, classifier exec), run with a JDK of this
// machine, storage in memory, on loopback.
//
//   node scripts/zipkin.mjs install     fetch the jar once into ~/.cache/auth-sidecar (Maven caches it too)
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, renameSync, rmSync } from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'
import { javaHome } from './keycloak.mjs'

export const ZIPKIN_VERSION = '3.5.1'

const cacheRoot = join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'auth-sidecar', `zipkin-${ZIPKIN_VERSION}`)

/** The server's executable jar, fetched through Maven when not cached. */
export function fetchZipkin () {
  const jar = join(cacheRoot, 'zipkin.jar')
  if (existsSync(jar)) return jar
  mkdirSync(cacheRoot, { recursive: true })
  const download = join(cacheRoot, 'download')
  rmSync(download, { recursive: true, force: true })
  const mvn = spawnSync('mvn', ['-q', '-B', 'dependency:copy', `-Dartifact=io.zipkin:zipkin-server:${ZIPKIN_VERSION}:jar:exec`, `-DoutputDirectory=${download}`], { encoding: 'utf8', env: { ...process.env, JAVA_HOME: javaHome() } })
  if (mvn.error !== undefined) throw new Error(`cannot run mvn (${mvn.error.code}): install Maven (Debian: apt-get install maven)`)
  if (mvn.status !== 0) throw new Error(`mvn could not fetch io.zipkin:zipkin-server:${ZIPKIN_VERSION}:jar:exec: ${(mvn.stdout + mvn.stderr).trim().split('\n').slice(-3).join(' ')}`)
  renameSync(join(download, `zipkin-server-${ZIPKIN_VERSION}-exec.jar`), jar)
  return jar
}

/**
 * Starts Zipkin on `port` (loopback, in-memory storage) and resolves once
 * its health check answers; `stop()` ends it.
 */
export async function startZipkin (port, timeoutMs = 120_000) {
  const jar = fetchZipkin()
  const java = join(javaHome(), 'bin', 'java')
  const child = spawn(java, ['-Xmx256m', '-jar', jar, `--server.port=${port}`, '--server.address=127.0.0.1'], {
    env: { PATH: process.env.PATH ?? '', STORAGE_TYPE: 'mem', QUERY_PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true
  })
  const output = []
  child.stdout.on('data', (c) => output.push(c.toString()))
  child.stderr.on('data', (c) => output.push(c.toString()))
  const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)))
  const stop = async () => {
    try { process.kill(-child.pid, 'SIGTERM') } catch {}
    let timer
    await Promise.race([exited, new Promise((resolve) => { timer = setTimeout(resolve, 10_000) })])
    clearTimeout(timer)
    try { process.kill(-child.pid, 'SIGKILL') } catch {}
  }
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (child.exitCode !== null) throw new Error(`zipkin exited (${child.exitCode}): ${output.join('').slice(-500)}`)
    try {
      const res = await fetch(`http://127.0.0.1:${port}/health`)
      if (res.ok) return { url: `http://127.0.0.1:${port}`, stop }
    } catch {}
    if (Date.now() > deadline) {
      await stop()
      throw new Error(`zipkin did not answer within ${timeoutMs} ms: ${output.join('').slice(-500)}`)
    }
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
}

if (process.argv[2] === 'install') console.log(`zipkin ${ZIPKIN_VERSION}: ${fetchZipkin()}`)
