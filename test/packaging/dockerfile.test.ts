import { readFileSync } from 'node:fs'
import t from 'tap'
import { root } from '../helpers/process.js'

const dockerfile = readFileSync(`${root}Dockerfile`, 'utf8')
const stages = dockerfile.split('\n').filter((l) => /^FROM /.test(l))
const final = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '))

t.test('multi-stage on a slim current Node LTS', async (t) => {
  t.ok(stages.length >= 2, `${stages.length} stages`)
  const image = /^ARG NODE_IMAGE=(\S+)/m.exec(dockerfile)?.[1] ?? ''
  t.match(image, /^node:(\d+)-\S*slim$/, 'a slim base')
  t.ok(Number(/^node:(\d+)/.exec(image)?.[1]) % 2 === 0 && Number(/^node:(\d+)/.exec(image)?.[1]) >= 24, 'an even (LTS) major, current')
})

t.test('the final stage holds the loader, the bundle, its licences, its code cache and package.json only (npm run test:image checks the built image)', async (t) => {
  const copies = final.split('\n').filter((l) => l.startsWith('COPY'))
  t.same(copies.map((l) => l.split(/\s+/).slice(1).join(' ')), [
    '--from=build /app/dist/package.json /app/dist/main.js /app/dist/sidecar.cjs /app/dist/sidecar.cjs.LEGAL.txt ./dist/',
    '--from=build /app/dist/code-cache ./dist/code-cache',
    'package.json ./'
  ])
  t.notMatch(final, /RUN /, 'nothing run in the final stage')
})

t.test('numeric non-root user, node as PID 1, ports, a health check without curl', async (t) => {
  t.match(final, /^USER \d+:\d+$/m)
  t.notMatch(final, /^USER (0|root)/m)
  t.match(final, /^ENTRYPOINT \["node", ("--[^"]+", )*"dist\/main\.js"\]$/m, 'exec form: SIGTERM reaches node')
  t.match(final, /^EXPOSE 8080 9090$/m)
  t.match(final, /^HEALTHCHECK .*\n?.*CMD \["node"/m)
  const instructions = dockerfile.split('\n').filter((l) => !l.startsWith('#')).join('\n')
  t.notMatch(instructions, /curl|wget/, 'no curl or wget used')
})

t.test('.dockerignore keeps the context small', async (t) => {
  const ignore = readFileSync(`${root}.dockerignore`, 'utf8')
  t.match(ignore, /^\*$/m, 'everything excluded by default')
  t.match(ignore, /^!src\/$/m)
})

t.test('the image, npm start and the bench start the sidecar with the same options', async (t) => {
  const { IMAGE_NODE_FLAGS, IMAGE_GLIBC_TUNABLES } = await import(`${root}scripts/image-options.mjs`) as { IMAGE_NODE_FLAGS: string, IMAGE_GLIBC_TUNABLES: string }
  const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(final)![1]!) as string[]
  t.same(entrypoint, ['node', ...IMAGE_NODE_FLAGS.split(' '), 'dist/main.js'])
  t.match(final, new RegExp(`GLIBC_TUNABLES=${IMAGE_GLIBC_TUNABLES}$`, 'm'))
  const start = (JSON.parse(readFileSync(`${root}package.json`, 'utf8')) as { scripts: { start: string } }).scripts.start
  t.equal(start, `GLIBC_TUNABLES=${IMAGE_GLIBC_TUNABLES} node ${IMAGE_NODE_FLAGS} dist/main.js`)
})

t.test('the bench and the flood test give the image\'s options as they are meant for their Node', async (t) => {
  const { IMAGE_NODE_FLAGS, nodeFlagsFor } = await import(`${root}scripts/image-options.mjs`) as { IMAGE_NODE_FLAGS: string, nodeFlagsFor: (v?: string) => string }
  const imageMajor = /^ARG NODE_IMAGE=node:(\d+)/m.exec(dockerfile)![1]!
  t.equal(nodeFlagsFor(`${imageMajor}.0.0`), IMAGE_NODE_FLAGS, 'the image\'s Node gets exactly the ENTRYPOINT\'s options')
  t.equal(nodeFlagsFor('22.0.0'), IMAGE_NODE_FLAGS)
  // Node 20's V8 caps the young generation itself; the option cost CPU there
  t.equal(nodeFlagsFor('v20.18.0'), IMAGE_NODE_FLAGS.replace(' --max-semi-space-size=8', ''))
  t.notMatch(nodeFlagsFor('20.20.2'), /semi-space/)
})
