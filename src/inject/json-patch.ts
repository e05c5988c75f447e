/** An RFC 6902 operation, of the two kinds the webhook writes. */
export type Operation =
  | { op: 'add', path: string, value: unknown }
  | { op: 'replace', path: string, value: unknown }

/** A JSON Pointer token (RFC 6901): `~` and `/` escaped, so `auth-sidecar.io/status` is `auth-sidecar.io~1status`. */
export function pointerToken (key: string): string {
  return key.replace(/~/g, '~0').replace(/\//g, '~1')
}

/**
 * Operations that add to a pod and never replace what it has: an array is
 * added whole only where it is absent, otherwise each item goes at its end
 * (or its start), so that a field another webhook filled in is kept.
 */
export class PatchBuilder {
  readonly operations: Operation[] = []

  /** `items` after what `current` holds at `path`, or as the whole array when there is none. */
  append (path: string, current: unknown[] | undefined, items: readonly unknown[]): void {
    if (items.length === 0) return
    if (current === undefined) this.operations.push({ op: 'add', path, value: [...items] })
    else for (const item of items) this.operations.push({ op: 'add', path: `${path}/-`, value: item })
  }

  /** `item` first in the array at `path`, or as the whole array when there is none. */
  prepend (path: string, current: unknown[] | undefined, item: unknown): void {
    this.operations.push(current === undefined ? { op: 'add', path, value: [item] } : { op: 'add', path: `${path}/0`, value: item })
  }

  /** `value` under `key` of the object at `path`, the object made when there is none. */
  setKey (path: string, current: object | undefined, key: string, value: unknown): void {
    this.operations.push(current === undefined ? { op: 'add', path, value: { [key]: value } } : { op: 'add', path: `${path}/${pointerToken(key)}`, value })
  }

  replace (path: string, value: unknown): void {
    this.operations.push({ op: 'replace', path, value })
  }
}
