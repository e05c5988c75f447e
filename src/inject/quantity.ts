/**
 * Kubernetes resource quantities (`250m`, `128Mi`, `1.5`, `2e3`), as the
 * API server accepts them for requests and limits: a non-negative number
 * and one suffix, binary, decimal or an exponent.
 */
const QUANTITY = /^\+?(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?\d+)?$/

const FACTORS: Record<string, number> = {
  '': 1,
  m: 1e-3,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60
}

/** The quantity's value in base units (cores, bytes), or undefined when it is not one. */
export function quantityValue (text: string): number | undefined {
  const match = QUANTITY.exec(text)
  if (match === null) return undefined
  const number = Number(match[1])
  const suffix = match[2] ?? ''
  const factor = /^[eE]/.test(suffix) ? 10 ** Number(suffix.slice(1)) : FACTORS[suffix]!
  const value = number * factor
  return Number.isFinite(value) ? value : undefined
}
