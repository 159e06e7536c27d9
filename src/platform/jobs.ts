import type { Deps } from './context.js';

/** Background work that runs while the app does; `stop` ends it (the app calls it on close). */
export interface Stoppable {
  stop(): Promise<void>;
}

/**
 * A domain's background work (start-up checks, reconcilers, sweepers, prebuilds), started by app.ts in one place
 * after the routes are registered and stopped when the app closes. `start` resolves once its start-up part is done.
 */
export type StartJobs = (deps: Deps) => Promise<Stoppable>;

export const nothingToStop: Stoppable = { stop: async () => undefined };

/** Calls `fn` every `ms` (never two at once) until stopped; a failure is logged and the next round still runs. */
export function every(deps: Pick<Deps, 'log'>, ms: number, what: string, fn: () => Promise<unknown>): Stoppable {
  let running: Promise<unknown> | null = null;
  const timer = setInterval(() => {
    if (running) return;
    running = fn()
      .catch((err) => deps.log.warn({ err }, `${what} failed`))
      .finally(() => (running = null));
  }, ms);
  timer.unref();
  return {
    async stop() {
      clearInterval(timer);
      await running;
    },
  };
}

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

/**
 * The cron expression that fires every `ms`, when `ms` is a whole step of the clock: minutes dividing an hour,
 * hours dividing a day, or one day (at midnight UTC). Null otherwise.
 */
export function cronForPeriod(ms: number): string | null {
  if (ms === DAY) return '0 0 * * *';
  if (ms % HOUR === 0 && ms < DAY && 24 % (ms / HOUR) === 0) return ms === HOUR ? '0 * * * *' : `0 */${ms / HOUR} * * *`;
  if (ms % MINUTE === 0 && ms < HOUR && 60 % (ms / MINUTE) === 0) return ms === MINUTE ? '* * * * *' : `*/${ms / MINUTE} * * * *`;
  return null;
}

/**
 * Periodic work of the whole installation (not of one node): on the job engine when the period is a minute or more
 * and a whole step of the clock (`cronForPeriod`), so each tick runs once across replicas, on whichever is free,
 * with the engine's timeout, instead of once in every replica. A period the engine's cron cannot express (the
 * sub-minute backstops, and the periods tests shorten to milliseconds) stays a per-process timer (`every`), whose
 * rounds are safe on several replicas because each claims its rows in a transaction.
 */
export async function recurring(
  deps: Pick<Deps, 'jobs' | 'log'>,
  queue: string,
  ms: number,
  fn: () => Promise<unknown>,
  opts: { timeoutMs?: number } = {},
): Promise<Stoppable> {
  const cron = ms >= MINUTE ? cronForPeriod(ms) : null;
  if (!cron) return every(deps, ms, queue, fn);
  await deps.jobs.work(queue, async () => void (await fn()), { retryLimit: 0, timeoutMs: opts.timeoutMs ?? 10 * MINUTE });
  await deps.jobs.schedule(queue, { cron, queue });
  return nothingToStop;
}
