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

t.test('the final stage holds the bundle, its chunks and their licences, and package.json only (npm run test:image checks the built image)', async (t) => {
  const copies = final.split('\n').filter((l) => l.startsWith('COPY'))
  t.same(copies.map((l) => l.split(/\s+/).slice(1).join(' ')), [
    '--from=build /app/dist/main.js ./dist/',
    '--from=build /app/dist/chunks ./dist/chunks',
    'package.json ./'
  ])
  t.match(dockerfile, /^RUN npm run build && rm dist\/chunks\/\*\.map$/m, 'no source maps shipped')
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

t.test('start-up options are written once, in the image, and allocator settings nowhere', async (t) => {
  const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(final)![1]!) as string[]
  t.same(entrypoint, ['node', '--max-semi-space-size=8', 'dist/main.js'])
  const start = (JSON.parse(readFileSync(`${root}package.json`, 'utf8')) as { scripts: { start: string } }).scripts.start
  t.equal(start, 'node dist/main.js')
  t.notMatch(dockerfile, /GLIBC_TUNABLES|NODE_OPTIONS/)
})
