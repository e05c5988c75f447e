import closeWithGrace from 'close-with-grace'
import type pino from 'pino'

/** How long the reviews in progress may take once the server closes; the API server waits at most 30 s for one. */
export const CLOSE_GRACE_MS = 10_000

/** The signals that stop the webhook; a second one ends the wait before the close. */
const STOP_SIGNALS = ['SIGTERM', 'SIGINT'] as const

export interface ShutdownOptions {
  /** how long /mutate is still served after the first signal (INJECT_SHUTDOWN_DELAY_MS); 0 closes at once */
  delayMs: number
  log: pino.Logger
  /** turns /readyz to 503 and lets keep-alive connections go */
  stopping: () => void
  /** closes the server and what it reads; resolves once the reviews in progress have finished */
  close: () => Promise<void>
}

/**
 * The webhook's end. On SIGTERM or SIGINT `/readyz` answers 503 at once,
 * while `/mutate` is still served for `delayMs`: the API server keeps
 * calling the endpoints it knows until they are updated, and with
 * failurePolicy Fail a review that reaches no server fails the pod's
 * creation. Meanwhile each answer closes its connection, so that the API
 * server reconnects to another replica. A second signal ends the wait.
 * The server then closes, the reviews in progress finishing within
 * CLOSE_GRACE_MS, and the process exits 0; a signal during the close
 * exits 1 at once, and an uncaught error closes at once and exits 1.
 * Resolves with that exit code once the server has closed.
 */
export async function shutDownOnSignal (o: ShutdownOptions): Promise<number> {
  let closed!: (code: number) => void
  const done = new Promise<number>((resolve) => { closed = resolve })
  let phase: 'serving' | 'waiting' | 'closing' = 'serving'
  let wait: NodeJS.Timeout | undefined
  let first: NodeJS.Signals | undefined
  // close-with-grace keeps the backstop and the uncaught errors; the stop
  // signals are handled here, since its second signal would exit 1 at once
  // instead of ending the wait.
  const grace = closeWithGrace({
    delay: CLOSE_GRACE_MS,
    skip: [...STOP_SIGNALS],
    logger: { error: (msg: unknown) => o.log.error({ detail: String(msg) }, 'shutdown') }
  }, async ({ err }) => {
    phase = 'closing'
    clearTimeout(wait)
    o.stopping()
    if (err !== undefined) o.log.error({ err }, 'unexpected error: shutting down')
    else o.log.info({ signal: first }, 'shutting down: finishing the reviews in progress')
    await o.close()
    o.log.info({}, 'stopped')
    o.log.flush()
    closed(err === undefined ? 0 : 1)
  })

  const onSignal = (signal: NodeJS.Signals): void => {
    first ??= signal
    if (phase === 'serving' && o.delayMs > 0) {
      phase = 'waiting'
      o.stopping()
      o.log.info({ signal, delayMs: o.delayMs }, 'shutting down: /readyz answers 503, reviews still served until the delay ends')
      wait = setTimeout(() => { void grace.close() }, o.delayMs)
    } else if (phase !== 'closing') {
      if (phase === 'waiting') o.log.info({ signal }, 'second signal: the delay ends now')
      void grace.close()
    } else {
      o.log.error({ signal }, 'signal during the close: exiting at once')
      o.log.flush()
      process.exit(1)
    }
  }
  for (const signal of STOP_SIGNALS) process.on(signal, onSignal)
  return await done
}
