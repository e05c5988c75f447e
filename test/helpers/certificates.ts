import { root } from './process.js'

/** A certificate and its key, as files and as text. */
export interface Issued {
  certFile: string
  keyFile: string
  cert: string
  key: string
}

export interface IssueOptions {
  /** the subject's CN */
  cn: string
  /** subjectAltName, e.g. `IP:127.0.0.1,DNS:localhost` (server certificates) */
  san?: string
  /** validity; by default from an hour ago for two days */
  notBefore?: Date
  notAfter?: Date
  /** the key's type: EC P-256 by default */
  keyType?: 'ec' | 'rsa'
}

/** A CA made at test time with the openssl CLI (scripts/test-ca.mjs, shared with the Keycloak the tests start). */
export interface TestCa {
  readonly dir: string
  readonly caFile: string
  issue(name: string, o: IssueOptions): Issued
}

const made = await import(`${root}scripts/test-ca.mjs`) as { TestCa: { create(dir: string, name?: string): TestCa, open(dir: string): TestCa } }

export const TestCa = made.TestCa
