import { existsSync, readFileSync } from 'node:fs'
import { homedir } from 'node:os'
import { createRemoteJWKSet, jwtVerify } from 'jose'
import t from 'tap'
import { until } from '../helpers/build.js'
import { freePort, root, start } from '../helpers/process.js'
import { FakeUpstream } from '../helpers/upstream.js'

/**
 * The built sidecar against real Keycloak (the repository's realm file, with
 * lifetimes shortened), through several renewals and a forced fallback to the
 * password grant. Needs a container runtime: without one it is skipped, and
 * says so. KEYCLOAK_IMAGE picks another Keycloak version.
 */
const KEYCLOAK_IMAGE = process.env.KEYCLOAK_IMAGE ?? 'quay.io/keycloak/keycloak:26.4.7'
const ACCESS_SECONDS = 10
const SESSION_MAX_SECONDS = 25
const RUN_SECONDS = 40

/** Why no container runtime can be used, or undefined when one answers. */
async function containerRuntime (): Promise<string | undefined> {
  const sockets = ['/var/run/docker.sock', `${homedir()}/.docker/run/docker.sock`, '/run/podman/podman.sock', `/run/user/${process.getuid?.() ?? 0}/podman/podman.sock`]
  if (process.env.DOCKER_HOST === undefined && !existsSync(`${homedir()}/.testcontainers.properties`) && !sockets.some((s) => existsSync(s))) {
    return 'no DOCKER_HOST and no Docker or Podman socket'
  }
  try {
    const { getContainerRuntimeClient } = await import('testcontainers')
    await Promise.race([
      getContainerRuntimeClient(),
      new Promise((_resolve, reject) => setTimeout(() => reject(new Error('timed out looking for one')), 15_000))
    ])
    return undefined
  } catch (err) {
    return (err as Error).message.split('\n')[0]
  }
}

/**
 * Why Keycloak's image cannot be had, or undefined once it is there: an
 * engine without a reachable registry (these machines) skips, and says so.
 */
async function keycloakImage (): Promise<string | undefined> {
  try {
    const { getContainerRuntimeClient, ImageName } = await import('testcontainers')
    const client = await getContainerRuntimeClient()
    const image = ImageName.fromString(KEYCLOAK_IMAGE)
    if (await client.image.exists(image)) return undefined
    let timer: NodeJS.Timeout | undefined
    await Promise.race([
      client.image.pull(image),
      new Promise((_resolve, reject) => { timer = setTimeout(() => reject(new Error('timed out after 180 s')), 180_000) })
    ]).finally(() => clearTimeout(timer))
    // testcontainers' pull can end without an error and without the image
    if (!await client.image.exists(image)) throw new Error('the pull ended without the image')
    return undefined
  } catch (err) {
    return `the container engine cannot pull ${KEYCLOAK_IMAGE} (${(err as Error).message.split('\n')[0]!.slice(0, 200)}): no image registry reachable`
  }
}

const runtimeMissing = await containerRuntime()
const missing = runtimeMissing === undefined
  ? await keycloakImage()
  : `no container runtime available (${runtimeMissing}): the real-Keycloak test needs Docker or Podman`

t.test(`real Keycloak (${KEYCLOAK_IMAGE}): renewals, then the password grant when the session ends`, {
  skip: missing ?? false,
  timeout: 600_000
}, async (t) => {
  const { GenericContainer, Wait } = await import('testcontainers')
  const realm = JSON.parse(readFileSync(`${root}deploy/keycloak/service-realm.json`, 'utf8')) as Record<string, unknown>
  realm.accessTokenLifespan = ACCESS_SECONDS
  realm.ssoSessionMaxLifespan = SESSION_MAX_SECONDS
  const keycloak = await new GenericContainer(KEYCLOAK_IMAGE)
    .withCommand(['start-dev', '--import-realm', '--health-enabled=true'])
    .withEnvironment({ KC_HTTP_RELATIVE_PATH: '/auth', KC_BOOTSTRAP_ADMIN_USERNAME: 'admin', KC_BOOTSTRAP_ADMIN_PASSWORD: 'admin' })
    .withCopyContentToContainer([{ content: JSON.stringify(realm), target: '/opt/keycloak/data/import/service-realm.json' }])
    .withExposedPorts(8080, 9000)
    .withWaitStrategy(Wait.forHttp('/auth/health/ready', 9000).forStatusCode(200))
    .withStartupTimeout(300_000)
    .start()
  t.teardown(() => keycloak.stop())
  const authUrl = `http://${keycloak.getHost()}:${keycloak.getMappedPort(8080)}`

  const upstream = new FakeUpstream()
  await upstream.listen()
  t.teardown(() => upstream.close())
  const [proxyPort, adminPort] = [await freePort(), await freePort()]
  const run = start({
    BASE_URL: `${upstream.url}/api`,
    AUTH_URL: authUrl,
    AUTH_CLIENT_ID: 'legacy-app',
    AUTH_CLIENT_SECRET: 'legacy-app-secret',
    AUTH_USERNAME: 'service-user',
    AUTH_PASSWORD: 'service-password',
    PROXY_PORT: String(proxyPort),
    ADMIN_PORT: String(adminPort),
    ADMIN_HOST: '127.0.0.1'
  })
  t.teardown(() => { run.child.kill('SIGKILL') })
  await until(() => run.stdout.some((l) => l.includes('token obtained')), 60_000)

  const deadline = Date.now() + RUN_SECONDS * 1000
  let non200 = 0
  while (Date.now() < deadline) {
    const res = await fetch(`http://127.0.0.1:${proxyPort}/item`)
    if (res.status !== 200) non200++
    await res.arrayBuffer()
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  t.equal(non200, 0, 'every request answered 200')

  // Every token the upstream saw was valid for Keycloak when it arrived.
  const jwks = createRemoteJWKSet(new URL(`${authUrl}/auth/realms/service-realm/protocol/openid-connect/certs`))
  const seen = new Map<string, number>()
  for (const r of upstream.received) seen.set(r.headers.authorization!.slice(7), r.at)
  for (const [token, at] of seen) {
    const { payload } = await jwtVerify(token, jwks, { currentDate: new Date(at) })
    t.equal(payload.preferred_username, 'service-user')
  }
  t.ok(seen.size >= 4, `${seen.size} distinct tokens over ${RUN_SECONDS} s`)

  const events = run.stdout.filter((l) => l.includes('"event":"token"')).map((l) => JSON.parse(l) as { grant?: string, outcome?: string })
  const grants = events.filter((e) => e.outcome === 'success').map((e) => e.grant)
  t.ok(grants.filter((g) => g === 'refresh_token').length >= 2, `renewed by the refresh grant (${grants.join(' ')})`)
  t.ok(grants.lastIndexOf('password') > grants.indexOf('refresh_token'), 'then the password grant when the session ran out')
  t.notMatch(run.stdout.join('\n'), /service-password|legacy-app-secret/)
})
