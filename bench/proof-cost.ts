// The CPU of one DPoP proof, made the sidecar's way (DpopKey.proof:
// node:crypto's synchronous signing) and with jose's SignJWT (WebCrypto),
// in alternating turns after one to warm up: what a proof per request costs
// either way. Run by bench/run.mjs; prints one JSON line.
// `node --import=./node_modules/@tapjs/typescript/dist/esm/import.mjs bench/proof-cost.ts [alg]`
import { generateKeyPairSync, randomUUID } from 'node:crypto'
import { SignJWT, type JWK } from 'jose'
import type { DpopAlgorithm } from '../src/config/types.js'
import { DpopKey } from '../src/token/dpop.js'

const alg = (process.argv[2] ?? 'ES256') as DpopAlgorithm
const COUNT = 2000
const TURNS = 7
const htu = 'http://127.0.0.1:8080/v1/items'
const token = 'x'.repeat(900)

const key = await DpopKey.generate(alg)
const pair = alg === 'ES256'
  ? generateKeyPairSync('ec', { namedCurve: 'P-256' })
  : alg === 'EdDSA' ? generateKeyPairSync('ed25519') : generateKeyPairSync('rsa', { modulusLength: 2048 })
const jwk = pair.publicKey.export({ format: 'jwk' }) as JWK
const ath = 'q'.repeat(43)

const ways: Record<string, () => unknown> = {
  [`${alg}, the sidecar's DpopKey.proof (node:crypto)`]: () => key.proof('GET', htu, { accessToken: token }),
  [`${alg}, jose SignJWT (WebCrypto)`]: async () => await new SignJWT({ htm: 'GET', htu, ath })
    .setProtectedHeader({ alg, typ: 'dpop+jwt', jwk }).setJti(randomUUID()).setIssuedAt().sign(pair.privateKey)
}
const samples: Record<string, number[]> = Object.fromEntries(Object.keys(ways).map((way) => [way, []]))
for (let turn = 0; turn <= TURNS; turn++) {
  for (const [way, make] of Object.entries(ways)) {
    const before = process.cpuUsage()
    for (let i = 0; i < COUNT; i++) await make()
    const used = process.cpuUsage(before)
    if (turn > 0) samples[way]!.push((used.user + used.system) / COUNT)
  }
}
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!
process.stdout.write(JSON.stringify({
  count: COUNT,
  turns: TURNS,
  ways: Object.fromEntries(Object.entries(samples).map(([way, us]) => [way, { medianUs: median(us), minUs: Math.min(...us), maxUs: Math.max(...us) }]))
}) + '\n')
