// The real Keycloak for the tests: the official server distribution from
// Maven Central, run with a JDK of this machine on loopback.
//
//   node scripts/keycloak.mjs install        fetch (Maven), build every server and, on a JDK that
//                                            makes them, train its AOT cache; what .ci/run does
//   node scripts/keycloak.mjs serve <dir>    start them, write <dir>/state.json, stop when told or
//                                            when the process that started it is gone (tap's before)
//
// Three servers run. Two are one per path layout: Keycloak 17+ serves at
// the root, earlier versions (and `--http-relative-path=/auth`) under /auth;
// the root one also serves HTTPS with client certificates (mutual TLS). The
// third is the topology of most clusters: reached at a loopback address
// while its hostname, and so every issuer it names, is a public one the
// tests never dial (PUBLIC_HOSTNAME), its backchannel endpoints dynamic;
// it alone has OpenTelemetry tracing on, so that its log lines carry the
// trace id each request came with.
// Each has an in-memory database, so every test run starts from nothing;
// tests create their own realms through the admin API from the files in
// test/keycloak/.
import { execFileSync, spawn, spawnSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync, openSync } from 'node:fs'
import { createServer } from 'node:net'
import { homedir, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { TestCa } from './test-ca.mjs'

export const KEYCLOAK_VERSION = '26.7.3'
export const ADMIN = { username: 'admin', password: 'admin-password-for-tests' }
export const LAYOUTS = { root: '/', auth: '/auth' }
/**
 * How a traced server runs. Every log line carries the trace id its request
 * came with (`traceId=...` in the console format); the jboss-logging event
 * listener's lines (a LOGIN for each password grant, a CLIENT_LOGIN for
 * each client_credentials one) are logged at debug, so its category is.
 * Sampler ratio 0: Keycloak records and exports none of its own spans
 * (its endpoint, the discard port, is never dialled), while the trace id
 * of the request's traceparent still reaches the log.
 */
const TRACED_RUN_OPTIONS = ['--log-level=warn,org.keycloak.events:debug', '--tracing-sampler-ratio=0', '--tracing-endpoint=http://127.0.0.1:9']
/**
 * The builds, each a copy of the distribution built with BUILD_OPTIONS and
 * its `options`, started with its `run` options: one per path layout, and
 * the root layout with tracing on (`--tracing-enabled` is a build option).
 */
const BUILDS = {
  root: { layout: 'root', options: ['--https-client-auth=request'], run: ['--log-level=warn'] },
  auth: { layout: 'auth', options: ['--http-relative-path=/auth'], run: ['--log-level=warn'] },
  traced: { layout: 'root', options: ['--https-client-auth=request', '--tracing-enabled=true'], run: TRACED_RUN_OPTIONS }
}
/** The servers a test run starts, each with its build: each layout's, and one with a public hostname and tracing. */
export const SERVERS = { root: 'root', auth: 'auth', hostname: 'traced' }
/** The hostname server's public URL: a name under .test, which never resolves. */
export const PUBLIC_HOSTNAME = 'https://sso.auth-sidecar.test'
/** Build options: each set of them is a home of its own. */
const BUILD_OPTIONS = ['--db=dev-mem', '--health-enabled=true', '--features=dpop,client-auth-federated,kubernetes-service-accounts']
/**
 * Start options of every server. `--cache` is a start option: without it a
 * server in production mode forms a JGroups cluster (discovery through its
 * database, certificates made for it, ports bound on the machine's address),
 * which a test server does not need.
 */
const START_OPTIONS = ['--cache=local']
/**
 * The JVM's options: a test server lives for minutes and is asked little,
 * so the work of starting it is what counts. C1 alone compiles what start-up
 * runs at a fraction of C2's cost, and the serial collector has no threads
 * to keep busy; G1, the server's default, is meant for a long-lived heap.
 */
const JVM_OPTIONS = ['-XX:TieredStopAtLevel=1', '-XX:-UseG1GC', '-XX:+UseSerialGC']
/**
 * How long the servers have to be ready, all of them, from the moment the
 * supervisor starts them: three at once on two cores, beside a test run,
 * take a few minutes on a slow machine.
 */
export const READY_WITHIN_MS = 300_000

const cacheRoot = join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'auth-sidecar', `keycloak-${KEYCLOAK_VERSION}`)
const repository = fileURLToPath(new URL('..', import.meta.url))

/** A JDK Keycloak supports, newest first: JAVA_HOME if set, else one under /usr/lib/jvm. */
export function javaHome () {
  const candidates = process.env.JAVA_HOME ? [process.env.JAVA_HOME] : []
  if (existsSync('/usr/lib/jvm')) {
    const dirs = readdirSync('/usr/lib/jvm').map((d) => join('/usr/lib/jvm', d))
    for (const major of [25, 21, 17]) candidates.push(...dirs.filter((d) => new RegExp(`[-.]${major}([-.]|$)`).test(d)))
  }
  for (const dir of candidates) {
    if (existsSync(join(dir, 'bin', 'java'))) return dir
  }
  throw new Error('no JDK found: set JAVA_HOME or install OpenJDK 17, 21 or 25 under /usr/lib/jvm')
}

/** The unpacked distribution, fetched through Maven (its local repository caches the zip). */
export function fetchDistribution () {
  const dist = join(cacheRoot, 'dist')
  if (existsSync(join(dist, 'bin', 'kc.sh'))) return dist
  mkdirSync(cacheRoot, { recursive: true })
  const download = join(cacheRoot, 'download')
  rmSync(download, { recursive: true, force: true })
  const mvn = spawnSync('mvn', ['-q', '-B', 'dependency:copy', `-Dartifact=org.keycloak:keycloak-quarkus-dist:${KEYCLOAK_VERSION}:zip`, `-DoutputDirectory=${download}`], { encoding: 'utf8', env: { ...process.env, JAVA_HOME: javaHome() } })
  if (mvn.error !== undefined) throw new Error(`cannot run mvn (${mvn.error.code}): install Maven (Debian: apt-get install maven)`)
  if (mvn.status !== 0) throw new Error(`mvn could not fetch org.keycloak:keycloak-quarkus-dist:${KEYCLOAK_VERSION}:zip: ${(mvn.stdout + mvn.stderr).trim().split('\n').slice(-3).join(' ')}`)
  execFileSync('unzip', ['-q', '-o', join(download, `keycloak-quarkus-dist-${KEYCLOAK_VERSION}.zip`), '-d', download])
  renameSync(join(download, `keycloak-${KEYCLOAK_VERSION}`), dist)
  rmSync(download, { recursive: true, force: true })
  return dist
}

/**
 * A copy of the distribution with one of BUILDS made (the build is what
 * makes starts quick), its home named after its options: checkouts with
 * other options each keep their own. Built aside and moved into place, so
 * that a run meanwhile never meets half a home.
 */
export function buildHome (name) {
  const options = [...BUILD_OPTIONS, ...BUILDS[name].options]
  const home = join(cacheRoot, `${name}-${createHash('sha256').update(options.join(' ')).digest('hex').slice(0, 8)}`)
  const marker = join(home, '.auth-sidecar-build')
  if (existsSync(marker)) return home
  const dist = fetchDistribution()
  const building = `${home}.building-${process.pid}`
  rmSync(building, { recursive: true, force: true })
  execFileSync('cp', ['-r', dist, building])
  const build = spawnSync(join(building, 'bin', 'kc.sh'), ['build', ...options], { encoding: 'utf8', env: { ...process.env, JAVA_HOME: javaHome() } })
  if (build.status !== 0) {
    rmSync(building, { recursive: true, force: true })
    throw new Error(`kc.sh build failed: ${(build.stdout + build.stderr).trim().split('\n').slice(-5).join(' ')}`)
  }
  writeFileSync(join(building, '.auth-sidecar-build'), options.join(' '))
  rmSync(home, { recursive: true, force: true })
  try { renameSync(building, home) } catch (err) {
    // another process moved its build into place first: the same build
    rmSync(building, { recursive: true, force: true })
    if (!existsSync(marker)) throw err
  }
  return home
}

/** Whether this JDK writes an AOT cache from a training run and starts from it (JDK 25: JEP 483 and 514). */
function aotSupported (java) {
  const flags = spawnSync(join(java, 'bin', 'java'), ['-XX:+PrintFlagsFinal', '-version'], { encoding: 'utf8' })
  return / AOTCacheOutput /.test(flags.stdout ?? '')
}

/**
 * A build's AOT cache for one JDK: in the build's home, so that a new build
 * starts without one, and named after the JDK, whose own classes it holds.
 */
function aotCacheFile (home, java) {
  let release = ''
  try { release = readFileSync(join(java, 'release'), 'utf8') } catch {}
  return join(home, 'aot', `${createHash('sha256').update(`${java}\n${release}`).digest('hex').slice(0, 12)}.aot`)
}

/**
 * The training start of a build's AOT cache: its server started with
 * `-XX:AOTCacheOutput`, a realm made and a password grant answered (the
 * work the tests ask for), then stopped; the JVM writes the cache as it
 * exits. Nothing on a JDK without AOT caches: the servers start plainly.
 */
async function trainAotCache (server) {
  const java = javaHome()
  const home = buildHome(SERVERS[server])
  const cache = aotCacheFile(home, java)
  if (existsSync(cache)) return `AOT cache ${cache}`
  if (!aotSupported(java)) return `no AOT cache: the JDK in ${java} cannot make one`
  mkdirSync(join(home, 'aot'), { recursive: true })
  const output = `${cache}.${process.pid}.tmp`
  const dir = mkdtempSync(join(tmpdir(), `auth-sidecar-keycloak-training-${server}-`))
  const children = []
  try {
    const { child, info } = await startServer(server, dir, children, Date.now() + READY_WITHIN_MS, { aotOutput: output })
    await trainingWork(info.url)
    // the JVM writes the cache as it exits, which takes a while
    let timer
    const stopped = await new Promise((resolve) => {
      child.once('exit', () => resolve(true))
      timer = setTimeout(resolve, READY_WITHIN_MS, false)
      process.kill(-child.pid, 'SIGTERM')
    })
    clearTimeout(timer)
    if (!stopped || !existsSync(output) || statSync(output).size === 0) {
      throw new Error(`no AOT cache written by the training start of ${server} (its log: ${info.log})`)
    }
    renameSync(output, cache)
    rmSync(dir, { recursive: true, force: true })
    return `AOT cache ${cache}`
  } finally {
    for (const c of children) { try { process.kill(-c.pid, 'SIGKILL') } catch {} }
    rmSync(output, { force: true })
  }
}

/** What a test run asks of a server, once: an admin token, a realm of the tests' own, a password grant in it. */
async function trainingWork (url) {
  const post = async (path, body, headers = {}) => {
    const res = await fetch(`${url}${path}`, { method: 'POST', headers, body })
    const text = await res.text()
    if (!res.ok) throw new Error(`training: POST ${path}: ${res.status} ${text.slice(0, 200)}`)
    return text === '' ? {} : JSON.parse(text)
  }
  const { access_token: admin } = await post('/realms/master/protocol/openid-connect/token', new URLSearchParams({ grant_type: 'password', client_id: 'admin-cli', ...ADMIN }))
  const realm = { ...JSON.parse(readFileSync(join(repository, 'test/keycloak/realm.json'), 'utf8')), realm: 'training' }
  await post('/admin/realms', JSON.stringify(realm), { authorization: `Bearer ${admin}`, 'content-type': 'application/json' })
  await post('/realms/training/protocol/openid-connect/token', new URLSearchParams({
    grant_type: 'password', client_id: 'legacy-app', client_secret: 'legacy-app-secret-8f2d', username: 'service-user', password: 'service-user-password-5e1f'
  }))
}

async function freePort () {
  return await new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)) })
  })
}

async function untilReady (url, child, deadline) {
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`exited with code ${child.exitCode} while starting`)
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2_000) })
      if (res.ok) return
    } catch {}
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
  throw new Error(`not ready within ${READY_WITHIN_MS / 1000} s`)
}

/**
 * HTTPS beside HTTP on the root layout, for the mutual TLS tests: a CA made
 * for this run (in `<dir>/tls`, where the tests issue their client
 * certificates from it), a server certificate for 127.0.0.1, and client
 * certificates asked for and, when that CA signed them, taken
 * (`--https-client-auth=request`, a build option of the root layout; the CA
 * in Keycloak's truststore).
 */
function httpsOptions (dir, port) {
  const ca = TestCa.create(join(dir, 'tls'))
  const server = ca.issue('keycloak', { cn: '127.0.0.1', san: 'IP:127.0.0.1,DNS:localhost', keyType: 'rsa' })
  return {
    args: [`--https-port=${port}`, `--https-certificate-file=${server.certFile}`, `--https-certificate-key-file=${server.keyFile}`,
      `--truststore-paths=${ca.caFile}`, '--http-management-scheme=http'],
    info: { httpsUrl: `https://127.0.0.1:${port}`, caDir: ca.dir }
  }
}

/**
 * Starts one server, its process in `children` at once; resolves once
 * /health/ready answers and its HTTP port serves the master realm, by
 * `deadline` (ms since the epoch). Its ports are free when picked, but the
 * tests, which start meanwhile, may bind one first: then it starts again on
 * others. `aotOutput`: a training start, which writes the build's AOT cache
 * there as it exits; otherwise the cache is used when there is one.
 */
async function startServer (server, dir, children, deadline, { aotOutput } = {}) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startServerOn(server, dir, children, deadline, aotOutput)
    } catch (err) {
      if (attempt === 3 || !err.portTaken) throw err
    }
  }
}

async function startServerOn (server, dir, children, deadline, aotOutput) {
  const build = SERVERS[server]
  const { layout } = BUILDS[build]
  const home = buildHome(build)
  const java = javaHome()
  const [port, management] = [await freePort(), await freePort()]
  const https = server === 'root' ? httpsOptions(dir, await freePort()) : { args: [], info: {} }
  const hostname = server === 'hostname'
    ? { args: [`--hostname=${PUBLIC_HOSTNAME}`, '--hostname-backchannel-dynamic=true'], info: { publicUrl: PUBLIC_HOSTNAME } }
    : { args: ['--hostname-strict=false'], info: {} }
  const cache = aotCacheFile(home, java)
  const aot = aotOutput !== undefined ? [`-XX:AOTCacheOutput=${aotOutput}`] : existsSync(cache) ? [`-XX:AOTCache=${cache}`] : []
  const logFile = join(dir, `keycloak-${server}.log`)
  const log = openSync(logFile, 'w')
  const child = spawn(join(home, 'bin', 'kc.sh'), [
    'start', '--optimized', '--http-enabled=true', ...START_OPTIONS, ...hostname.args,
    '--http-host=127.0.0.1', `--http-port=${port}`, `--http-management-port=${management}`,
    ...BUILDS[build].run,
    ...https.args
  ], {
    env: {
      ...process.env,
      JAVA_HOME: java,
      JAVA_OPTS_KC_HEAP: '-Xms64m -Xmx768m',
      // two servers may run from one home: each keeps its transaction log apart
      JAVA_OPTS_APPEND: [...JVM_OPTIONS, ...aot, `-Dquarkus.transaction-manager.object-store.directory=${join(dir, `transactions-${server}`)}`].join(' '),
      KC_BOOTSTRAP_ADMIN_USERNAME: ADMIN.username,
      KC_BOOTSTRAP_ADMIN_PASSWORD: ADMIN.password
    },
    stdio: ['ignore', log, log],
    detached: true
  })
  children.push(child)
  const prefix = LAYOUTS[layout] === '/' ? '' : LAYOUTS[layout]
  const ready = async () => {
    await untilReady(`http://127.0.0.1:${management}${prefix}/health/ready`, child, deadline)
    // the management interface may answer before the HTTP server has failed to bind its port
    await untilReady(`http://127.0.0.1:${port}${prefix}/realms/master`, child, deadline)
  }
  await ready().catch((err) => {
    const output = readFileSync(logFile, 'utf8')
    if (child.exitCode !== null && output.includes('Address already in use')) err.portTaken = true
    const last = output.trim().split('\n').at(-1)?.slice(0, 300)
    err.message = `Keycloak (${server}) ${err.message}; its log ${logFile}${last ? ` ends: ${last}` : ''}`
    throw err
  })
  return { child, info: { server, layout, url: `http://127.0.0.1:${port}${prefix}`, pid: child.pid, log: logFile, ...https.info, ...hostname.info } }
}

/**
 * Serves a test run: every server, then `state.json` in `dir` with their
 * URLs (or the reason they could not start). Ends, taking Keycloak with it
 * (each server is the leader of its own process group), on SIGTERM or once
 * the process `watch` is gone, whether the servers are ready or not.
 */
async function serve (dir, watch) {
  mkdirSync(dir, { recursive: true })
  const state = join(dir, 'state.json')
  const write = (s) => { writeFileSync(`${state}.tmp`, JSON.stringify(s)); renameSync(`${state}.tmp`, state) }
  const children = []
  const stop = () => {
    for (const c of children) { try { process.kill(-c.pid, 'SIGKILL') } catch {} }
    process.exit(0)
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
  if (watch !== undefined) {
    setInterval(() => { try { process.kill(watch, 0) } catch { stop() } }, 2_000).unref()
  }
  write({ status: 'starting', version: KEYCLOAK_VERSION })
  try {
    // a checkout that never ran `install` builds here, before the servers' time starts
    for (const build of new Set(Object.values(SERVERS))) buildHome(build)
    const since = Date.now()
    const deadline = since + READY_WITHIN_MS
    write({ status: 'starting', version: KEYCLOAK_VERSION, readyBy: deadline })
    const started = await Promise.all(Object.keys(SERVERS).map(async (server) => await startServer(server, dir, children, deadline)))
    write({ status: 'ready', version: KEYCLOAK_VERSION, java: javaHome(), readyInMs: Date.now() - since, admin: ADMIN, servers: Object.fromEntries(started.map((s) => [s.info.server, s.info])) })
  } catch (err) {
    write({ status: 'failed', version: KEYCLOAK_VERSION, reason: err.message })
    for (const c of children) { try { process.kill(-c.pid, 'SIGKILL') } catch {} }
    process.exit(0)
  }
  // stays until stopped
  setInterval(() => {}, 60_000)
}

const [command, arg, watch] = process.argv.slice(2)
if (command === 'install') {
  for (const build of Object.keys(BUILDS)) console.log(`keycloak ${KEYCLOAK_VERSION} (${build}): ${buildHome(build)}`)
  console.log(`java: ${javaHome()}`)
  // a cache only speeds the start: without one the tests still run, and judge the server themselves
  const caches = await Promise.all(Object.keys(SERVERS).map(async (server) => `${server}: ${await trainAotCache(server).catch((err) => `no AOT cache: ${err.message}`)}`))
  for (const line of caches) console.log(line)
} else if (command === 'serve') {
  await serve(arg, watch === undefined ? undefined : Number(watch))
} else if (command !== undefined) {
  console.error('usage: node scripts/keycloak.mjs install | serve <dir> [pid to watch]')
  process.exit(2)
}
