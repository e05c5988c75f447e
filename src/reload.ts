import type pino from 'pino'
import type { Config } from './config/load.js'
import { ConfigError } from './errors.js'
import type { Applied } from './route-set.js'
import { watchFiles } from './config/watched-files.js'

/** What the reloader reads of a configuration: where its file is, every variable as set, its warnings. */
export type ReloadedConfig = Pick<Config, 'file' | 'variables' | 'warnings'>

export interface ReloaderOptions<C extends ReloadedConfig> {
  /** the configuration in use */
  config: C
  /** reads the configuration again (the environment, CONFIG_FILE, .env) */
  read: () => Promise<C>
  apply: (next: C) => Promise<Applied>
  count: (outcome: 'applied' | 'rejected') => void
  log: pino.Logger
}

/**
 * Re-reads the configuration when CONFIG_FILE changes (polled as the
 * secret files are: a Kubernetes ConfigMap's update swaps the symlink the
 * path goes through, which a poll of the path sees) and on `reload()`
 * (SIGHUP). A version that does not load changes nothing: it is named in a
 * warning, with every problem, and counted rejected. One that does is
 * applied; its log line names the routes added, removed and changed, and
 * the settings that wait for a restart.
 */
export class ConfigReloader<C extends ReloadedConfig> {
  readonly #o: ReloaderOptions<C>
  #config: C
  #running: Promise<void> = Promise.resolve()
  #again: string | undefined
  #busy = false
  #unwatch: (() => void) | undefined

  constructor (o: ReloaderOptions<C>) {
    this.#o = o
    this.#config = o.config
  }

  /** Watches CONFIG_FILE, when there is one. */
  watch (): void {
    const path = this.#config.file?.path
    if (path !== undefined) this.#unwatch ??= watchFiles([path], this.#changed)
  }

  close (): void {
    this.#unwatch?.()
    this.#unwatch = undefined
  }

  /** Reads the configuration again and applies it; resolves once done (a reload asked meanwhile runs after). */
  async reload (why: string): Promise<void> {
    if (this.#busy) {
      // the one after the run in progress reads what has changed since; one is enough for any number asked
      // a reason to say wins over the start's check, which says nothing when it finds nothing
      if (this.#again === undefined || this.#again === WATCH_CHECK) this.#again = why
      return await this.#running
    }
    this.#busy = true
    this.#running = this.#reload(why).finally(() => {
      this.#busy = false
      const again = this.#again
      this.#again = undefined
      if (again !== undefined) void this.reload(again)
    })
    return await this.#running
  }

  /** the watch's check at its start finds the file as read, nearly always: that is not worth a line */
  readonly #changed = (check: boolean): void => { void this.reload(check ? WATCH_CHECK : 'file changed') }

  async #reload (why: string): Promise<void> {
    const { log } = this.#o
    const file = this.#config.file?.path
    let next: C
    try {
      next = await this.#o.read()
    } catch (err) {
      // a problem names a variable or the file, never a value
      const problems = err instanceof ConfigError ? err.problems : ['the configuration could not be read']
      this.#o.count('rejected')
      log.warn({ event: 'config_reload', outcome: 'rejected', why, ...(file !== undefined && { file }), problems }, 'configuration not reloaded: the new version is invalid; the running one is kept')
      return
    }
    // the file's settings the environment overrides: an edit of one of them changes nothing
    const overridden = next.file !== undefined && next.file.overridden.length > 0 ? { overriddenByEnvironment: next.file.overridden } : {}
    if (sameVariables(next, this.#config)) {
      if (why !== WATCH_CHECK) log.info({ event: 'config_reload', outcome: 'unchanged', why, ...(file !== undefined && { file }), ...overridden }, 'configuration read again: unchanged')
      return
    }
    let applied: Applied
    try {
      applied = await this.#o.apply(next)
    } catch (err) {
      this.#o.count('rejected')
      log.warn({ event: 'config_reload', outcome: 'rejected', why, ...(file !== undefined && { file }), problems: [(err as Error).message] }, 'configuration not reloaded: the new version could not be applied; the running one is kept')
      return
    }
    const previous = this.#config
    this.#config = next
    this.#o.count('applied')
    for (const warning of next.warnings) if (!previous.warnings.includes(warning)) log.warn({ event: 'config' }, warning)
    log.info({ event: 'config_reload', outcome: 'applied', why, ...(file !== undefined && { file }), ...applied, ...overridden }, applied.restart.length === 0
      ? 'configuration reloaded'
      : `configuration reloaded; ${applied.restart.join(', ')} take effect at the next restart`)
  }
}

const WATCH_CHECK = 'file changed while starting'

function sameVariables (a: ReloadedConfig, b: ReloadedConfig): boolean {
  const names = new Set([...Object.keys(a.variables), ...Object.keys(b.variables)])
  for (const name of names) if (a.variables[name] !== b.variables[name]) return false
  return true
}
