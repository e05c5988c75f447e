// Prints docker-compose.yml with its Keycloak service replaced by the
// development token server (dist/dev/token-server.js on the base Node image),
// for `npm run test:image` where Keycloak's image cannot be pulled. Everything
// else (the example API, the sidecar, their wiring) is the file as users get it.
//   node scripts/compose-stand-in.mjs docker-compose.yml node:26-slim > compose.test.yml
import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { parse, stringify } from 'yaml'

const [file = 'docker-compose.yml', nodeImage = 'node:26-slim'] = process.argv.slice(2)
const compose = parse(readFileSync(file, 'utf8'))
const keycloak = compose.services.keycloak
const realm = '/auth/realms/service-realm'
const secret = compose.services.sidecar.environment.AUTH_CLIENT_SECRET
compose.services.keycloak = {
  image: nodeImage,
  working_dir: '/srv',
  command: ['node', 'dist/dev/token-server.js'],
  environment: { HOST: '0.0.0.0', PORT: '8080', PUBLIC_URL: 'http://keycloak:8080', TOKEN_SECONDS: '60', REFRESH_SECONDS: '300', ...(secret !== undefined && { CLIENT_SECRET: secret }) },
  volumes: [`${resolve('dist')}:/srv/dist:ro`, `${resolve('package.json')}:/srv/package.json:ro`],
  ports: keycloak.ports,
  healthcheck: {
    test: ['CMD', 'node', '-e', `fetch('http://127.0.0.1:8080${realm}/.well-known/openid-configuration').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))`],
    interval: '2s',
    timeout: '2s',
    retries: 30
  }
}
process.stdout.write(stringify(compose))
