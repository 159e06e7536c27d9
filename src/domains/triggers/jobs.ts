import type { Deps } from '../../platform/context.js';
import { nothingToStop, type Stoppable } from '../../platform/jobs.js';
import { pruneDeliveries } from './repo.js';

/** Delivery ids are kept this long: longer than any source retries a delivery. */
export const DELIVERY_RETENTION_MS = 7 * 24 * 3600 * 1000;
export const PRUNE_QUEUE = 'triggers.prune';

/**
 * Forgets trigger delivery ids older than a week: a job on the engine's cron, hourly and once across replicas (every
 * replica ran its own timer before), and once at start-up.
 */
export async function startTriggerJobs(deps: Deps): Promise<Stoppable> {
  const prune = () => pruneDeliveries(deps.db.kysely, new Date(Date.now() - DELIVERY_RETENTION_MS).toISOString());
  await prune().catch((err) => deps.log.error({ err }, 'the start-up trigger deliveries prune failed'));
  await deps.jobs.work(PRUNE_QUEUE, async () => void (await prune()), { retryLimit: 0, timeoutMs: 10 * 60_000 });
  await deps.jobs.schedule(PRUNE_QUEUE, { cron: '23 * * * *', queue: PRUNE_QUEUE });
  return nothingToStop;
}
