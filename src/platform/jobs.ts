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
