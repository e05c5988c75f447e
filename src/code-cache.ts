/**
 * What src/loader.ts did with V8's code cache for this process, as it leaves
 * it on a global symbol before it runs the bundle: `accepted` (V8 used the
 * cache), `rejected` (a cache was there but V8 refused it: another Node, or
 * other V8 options than it was made with; the bundle was compiled from
 * source), `absent` (no cache for this bundle, Node and options), `writing`
 * (the build is making one). Undefined when the sidecar runs from source.
 */
export type CodeCacheOutcome = 'accepted' | 'rejected' | 'absent' | 'writing'

export const CODE_CACHE_OUTCOME = Symbol.for('auth-sidecar.code-cache')

export function codeCacheOutcome (): CodeCacheOutcome | undefined {
  return (globalThis as { [CODE_CACHE_OUTCOME]?: CodeCacheOutcome })[CODE_CACHE_OUTCOME]
}
