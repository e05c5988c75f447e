// The forward proxy as applications meet it: clients nobody here wrote
// (Debian's curl, the JDK's java.net.http.HttpClient, Python's urllib and
// undici's EnvHttpProxyAgent), each pointed at the proxy and made to trust
// the forward CA through its own standard setting, call Keycloak's userinfo
// over HTTPS without an Authorization of their own and are answered as the
// sidecar's service account; anything that is not a route is refused.
import { execFile, spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createServer as createHttpServer, type Server } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import type { Test } from 'tap'
import { TestCa } from '../helpers/certificates.js'
import { keycloakTest } from '../helpers/keycloak.js'
import { root, spawnSidecar, untilReady } from '../helpers/process.js'

const SERVICE_SECRET = 'service-app-secret-3c7a'
/** What a client's own run may take at most (a JVM compiling its source file included). */
const CLIENT_TIMEOUT_MS = 60_000

/** What a client reported for one URL: the status and body it got, or the error it raised. */
interface Outcome {
  status?: number
  body?: string
  error?: string
}

/** The programs the clients are, each found where its users find it. */
interface Programs {
  curl: string
  python: string
  java: string
  keytool: string
}

/** The clients' programs, or what is missing. */
async function programs (): Promise<Programs | string> {
  const missing: string[] = []
  const onPath = (name: string): string => {
    const found = spawnSync(name, ['--version'], { stdio: 'ignore' })
    if (found.error !== undefined) missing.push(`${name} (not on PATH)`)
    return name
  }
  const curl = onPath('curl')
  const python = onPath('python3')
  // the JDK Keycloak itself runs on (JAVA_HOME or /usr/lib/jvm)
  const { javaHome } = await import(`${root}scripts/keycloak.mjs`) as { javaHome: () => string }
  let home = ''
  try { home = javaHome() } catch (err) { missing.push((err as Error).message) }
  const java = join(home, 'bin', 'java')
  const keytool = join(home, 'bin', 'keytool')
  if (home !== '' && !existsSync(keytool)) missing.push(`keytool (not in ${home}/bin)`)
  return missing.length > 0 ? `clients of the forward proxy missing: ${missing.join(', ')}` : { curl, python, java, keytool }
}

/** Runs a program to its end (at most CLIENT_TIMEOUT_MS) with exactly `env`; resolves with its exit code and output. */
async function run (command: string, args: string[], env: Record<string, string>, cwd: string): Promise<{ code: number, stdout: string, stderr: string }> {
  return await new Promise((resolve, reject) => {
    execFile(command, args, { env, cwd, timeout: CLIENT_TIMEOUT_MS, killSignal: 'SIGKILL', maxBuffer: 4 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err !== null && typeof err.code !== 'number') reject(new Error(`${command}: ${err.message} ${stderr}`))
      else resolve({ code: err === null ? 0 : err.code as number, stdout, stderr })
    })
  })
}

/** One JSON outcome a line, one line per URL asked, as the client scripts below print them. */
function outcomes (said: { code: number, stdout: string, stderr: string }, count: number): Outcome[] {
  const lines = said.stdout.split('\n').filter((l) => l.startsWith('{'))
  if (lines.length !== count) throw new Error(`expected ${count} outcomes, got: ${said.stdout} ${said.stderr} (exit ${said.code})`)
  return lines.map((l) => JSON.parse(l) as Outcome)
}

/** Java's single-file source program: the JDK's HttpClient with the default ProxySelector (the system properties). */
const JAVA_CLIENT = `
import java.net.ProxySelector;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

public class ForwardClient {
  public static void main(String[] args) {
    HttpClient client = HttpClient.newBuilder().proxy(ProxySelector.getDefault()).connectTimeout(Duration.ofSeconds(10)).build();
    for (String url : args) {
      String line;
      try {
        HttpResponse<String> res = client.send(HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(20)).GET().build(), HttpResponse.BodyHandlers.ofString());
        line = "{\\"status\\":" + res.statusCode() + ",\\"body\\":" + quote(res.body()) + "}";
      } catch (Exception e) {
        line = "{\\"error\\":" + quote(e + (e.getCause() == null ? "" : " (cause: " + e.getCause() + ")")) + "}";
      }
      System.out.println(line);
    }
  }

  static String quote(String s) {
    StringBuilder b = new StringBuilder("\\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\\\') b.append('\\\\').append(c);
      else if (c < 0x20) b.append(String.format("\\\\u%04x", (int) c));
      else b.append(c);
    }
    return b.append('"').toString();
  }
}
`

/** Python's standard library: urlopen with the default context and the environment's proxies. */
const PYTHON_CLIENT = `
import json, sys, urllib.error, urllib.request
for url in sys.argv[1:]:
    try:
        with urllib.request.urlopen(url, timeout=20) as res:
            print(json.dumps({"status": res.status, "body": res.read().decode()}))
    except urllib.error.HTTPError as e:
        print(json.dumps({"status": e.code, "body": e.read().decode()}))
    except Exception as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
`

/** Node with the repository's undici: its fetch through an EnvHttpProxyAgent, which reads HTTPS_PROXY and NO_PROXY. */
function nodeClient (undici: string): string {
  return `
import { EnvHttpProxyAgent, fetch } from ${JSON.stringify(undici)}
const dispatcher = new EnvHttpProxyAgent()
for (const url of process.argv.slice(2)) {
  try {
    const res = await fetch(url, { dispatcher, signal: AbortSignal.timeout(20_000) })
    console.log(JSON.stringify({ status: res.status, body: await res.text() }))
  } catch (err) {
    // fetch's TypeError says little: what the proxy answered is down its chain of causes
    const chain = []
    for (let e = err; e !== undefined && e !== null; e = e.cause) chain.push(\`\${e.name}: \${e.message}\`)
    console.log(JSON.stringify({ error: chain.join(' <- ') }))
  }
}
await dispatcher.close()
`
}

/** A server the clients trust that counts the connections it gets: refused destinations must see none. */
async function decoy (t: Test, server: Server): Promise<{ port: number, connections: () => number }> {
  let connections = 0
  server.on('connection', () => { connections++ })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { port: (server.address() as { port: number }).port, connections: () => connections }
}

keycloakTest('forward proxy with real clients: curl, the JDK\'s HttpClient, Python\'s urllib and undici\'s EnvHttpProxyAgent get Keycloak\'s userinfo as the sidecar\'s service account; other destinations refused', async (t, kc) => {
  const found = await programs()
  const https = kc.root.https
  if (typeof found === 'string' || https === undefined) {
    // as keycloakTest treats a missing Keycloak: a failure under CI=true, where it must run
    const missing = typeof found === 'string' ? found : 'the root Keycloak serves no HTTPS'
    if (process.env.CI === 'true') t.fail(missing)
    else t.plan(0, missing)
    return
  }
  const realm = await kc.root.realm(t)
  const dir = mkdtempSync(join(tmpdir(), 'forward-proxy-clients-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  // made for this run: its key never leaves the temporary directory
  const forwardCa = TestCa.create(join(dir, 'forward-ca'), 'auth-sidecar forward proxy CA')

  // Keycloak's userinfo, over its HTTPS, is the route's upstream: it answers only a token of the realm's
  const baseUrl = `${realm.httpsIssuer}/protocol/openid-connect`
  const userinfo = `${baseUrl}/userinfo`
  const keycloakCa = join(https.caDir, 'ca.pem')
  const sidecar = await spawnSidecar(t, baseUrl, '', '', {
    // userinfo takes tokens of the issuer it serves as: the HTTPS one
    AUTH_ISSUER_URL: realm.httpsIssuer,
    AUTH_TLS_CA_FILE: keycloakCa,
    AUTH_GRANT_TYPE: 'client_credentials',
    AUTH_CLIENT_ID: 'service-app',
    AUTH_CLIENT_SECRET: SERVICE_SECRET,
    AUTH_USERNAME: '',
    AUTH_PASSWORD: '',
    // userinfo answers tokens with the openid scope only
    AUTH_SCOPE: 'openid',
    UPSTREAM_TLS_CA_FILE: keycloakCa,
    FORWARD_PROXY_PORT: '0',
    FORWARD_PROXY_CA_CERT_FILE: forwardCa.caFile,
    FORWARD_PROXY_CA_KEY_FILE: join(forwardCa.dir, 'ca.key'),
    // every token request and answer logged too: none of it may show a secret
    LOG_LEVEL: 'debug'
  })
  await untilReady(sidecar)
  const listening = JSON.parse(sidecar.run.stdout.find((l) => l.includes('auth-sidecar listening'))!) as { forwardProxy?: string }
  t.match(listening.forwardProxy, /^127\.0\.0\.1:\d+$/, 'the forward proxy listens on PROXY_HOST')
  const proxy = `http://${listening.forwardProxy!}`

  // Destinations that are no route. The decoys' certificate is the forward
  // CA's, so that a client would take their answer if the proxy let it through.
  const decoyCert = forwardCa.issue('decoy', { cn: '127.0.0.1', san: 'IP:127.0.0.1' })
  const decoyTls = await decoy(t, createHttpsServer({ cert: decoyCert.cert, key: decoyCert.key }, (_req, res) => res.end('{"decoy":true}')))
  const decoyPlain = await decoy(t, createHttpServer((_req, res) => res.end('{"decoy":true}')))
  const refusedUrls = [
    `https://127.0.0.1:${decoyTls.port}/realms/${realm.name}/protocol/openid-connect/userinfo`,
    // Keycloak itself in clear: its http origin is not the route's https one
    `${realm.address}/protocol/openid-connect/userinfo`,
    `http://127.0.0.1:${decoyPlain.port}/`
  ]
  const urls = [userinfo, ...refusedUrls]

  // The same settings for every client: the proxy for both schemes, no NO_PROXY
  // (an environment of its own, so none is inherited), and nothing else.
  const proxyEnv = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? dir, http_proxy: proxy, https_proxy: proxy, HTTP_PROXY: proxy, HTTPS_PROXY: proxy }

  const curl = async (): Promise<Outcome[]> => await Promise.all(urls.map(async (url) => {
    const said = await run(found.curl, ['--silent', '--show-error', '--max-time', '20', '--write-out', '\n%{http_code}', url], { ...proxyEnv, CURL_CA_BUNDLE: forwardCa.caFile }, dir)
    if (said.code !== 0) return { error: `exit ${said.code}: ${said.stderr.trim()}` }
    const at = said.stdout.lastIndexOf('\n')
    return { status: Number(said.stdout.slice(at + 1)), body: said.stdout.slice(0, at) }
  }))

  const java = async (): Promise<Outcome[]> => {
    const truststore = join(dir, 'truststore.p12')
    const imported = await run(found.keytool, ['-importcert', '-noprompt', '-alias', 'forward-ca', '-file', forwardCa.caFile, '-keystore', truststore, '-storetype', 'PKCS12', '-storepass', 'changeit'], { PATH: proxyEnv.PATH }, dir)
    if (imported.code !== 0) throw new Error(`keytool: ${imported.stdout} ${imported.stderr}`)
    writeFileSync(join(dir, 'ForwardClient.java'), JAVA_CLIENT)
    const [, port] = listening.forwardProxy!.split(':')
    return outcomes(await run(found.java, [
      '-Dhttps.proxyHost=127.0.0.1', `-Dhttps.proxyPort=${port!}`, '-Dhttp.proxyHost=127.0.0.1', `-Dhttp.proxyPort=${port!}`,
      // empty, not unset: unset, the JDK goes around any proxy for localhost and 127.*
      '-Dhttp.nonProxyHosts=',
      `-Djavax.net.ssl.trustStore=${truststore}`, '-Djavax.net.ssl.trustStorePassword=changeit',
      join(dir, 'ForwardClient.java'), ...urls
    ], { PATH: proxyEnv.PATH, HOME: proxyEnv.HOME }, dir), urls.length)
  }

  const python = async (): Promise<Outcome[]> => {
    writeFileSync(join(dir, 'forward_client.py'), PYTHON_CLIENT)
    return outcomes(await run(found.python, [join(dir, 'forward_client.py'), ...urls], { ...proxyEnv, SSL_CERT_FILE: forwardCa.caFile }, dir), urls.length)
  }

  const node = async (): Promise<Outcome[]> => {
    const undici = pathToFileURL(createRequire(`${root}package.json`).resolve('undici')).href
    writeFileSync(join(dir, 'forward-client.mjs'), nodeClient(undici))
    // NODE_EXTRA_CA_CERTS: Node's own way to trust a CA, read as it starts
    return outcomes(await run(process.execPath, [join(dir, 'forward-client.mjs'), ...urls], { ...proxyEnv, NODE_EXTRA_CA_CERTS: forwardCa.caFile }, dir), urls.length)
  }

  const started = Date.now()
  const results = Object.fromEntries(await Promise.all(Object.entries({ curl, java, python, node }).map(async ([name, client]) => [name, await client()] as const)))
  t.comment(`the four clients ran in ${Date.now() - started} ms`)

  const serviceAccountId = await realm.userId('service-account-service-app')
  for (const [name, [got, ...refused]] of Object.entries(results)) {
    t.equal(got!.status, 200, `${name}: userinfo through the forward proxy answered 200 ${JSON.stringify(got)}`)
    if (got!.status === 200) {
      t.match(JSON.parse(got!.body!), { preferred_username: 'service-account-service-app', sub: serviceAccountId }, `${name}: as the sidecar's service account`)
    }
    refused.forEach((outcome, i) => {
      const url = refusedUrls[i]!
      // a CONNECT refused surfaces as the client's error naming the status; a request in clear as the proxy's answer
      const ok = outcome.status === 403 ? (JSON.parse(outcome.body!) as { error?: string }).error === 'destination_not_allowed' : /\b403\b/.test(outcome.error ?? '')
      t.ok(ok, `${name}: ${url} refused with 403: ${JSON.stringify(outcome)}`)
    })
  }
  t.equal(decoyTls.connections(), 0, 'no connection reached the https destination that is no route')
  t.equal(decoyPlain.connections(), 0, 'nor the http one')

  // Keycloak saw the four userinfo requests, each with the service account's token, and nothing else
  const seen = await realm.events(['USER_INFO_REQUEST', 'USER_INFO_REQUEST_ERROR'])
  t.same(seen.map((e) => `${e.type} ${e.clientId ?? ''} ${e.userId ?? ''}`), Array(4).fill(`USER_INFO_REQUEST service-app ${serviceAccountId}`), 'four userinfo requests, all accepted')

  const records = sidecar.run.stdout.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>)
  const userinfoPath = new URL(userinfo).pathname
  const forwarded = records.filter((r) => r.msg === 'request' && r.path === userinfoPath && r.destination === new URL(userinfo).origin)
  t.equal(forwarded.length, 4, 'one access line per client\'s userinfo request')
  t.ok(forwarded.every((r) => r.mode === 'forward' && r.route === 'default' && r.status === 200), `each in mode forward, route default, 200: ${JSON.stringify(forwarded)}`)
  const intercepted = records.filter((r) => r.method === 'CONNECT' && r.status === 200)
  t.ok(intercepted.length >= 4 && intercepted.every((r) => r.mode === 'forward' && r.route === 'default' && r.path === new URL(userinfo).host), `the tunnels logged as the default route's, at least one a client: ${JSON.stringify(intercepted)}`)
  const refusedLines = records.filter((r) => r.mode === 'forward' && r.status === 403)
  t.equal(refusedLines.length, 4 * refusedUrls.length, 'each refusal logged, once: no client tried again')
  t.ok(refusedLines.every((r) => r.route === '-'), `under no route: ${JSON.stringify(refusedLines)}`)

  const log = sidecar.run.stdout.join('\n') + sidecar.run.stderr.join('')
  t.notMatch(log, SERVICE_SECRET, 'the client secret is in no log line')
  t.notMatch(log, /eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}/, 'nor any token')
})
