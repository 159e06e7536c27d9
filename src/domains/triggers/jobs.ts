import type { Deps } from '../../platform/context.js';
import { every, type Stoppable } from '../../platform/jobs.js';
import { pruneDeliveries } from './repo.js';

/** Delivery ids are kept this long: longer than any source retries a delivery. */
export const DELIVERY_RETENTION_MS = 7 * 24 * 3600 * 1000;

/** Forgets trigger delivery ids older than a week, hourly (and once at start). */
export async function startTriggerJobs(deps: Deps): Promise<Stoppable> {
  const prune = () => pruneDeliveries(deps.db.kysely, new Date(Date.now() - DELIVERY_RETENTION_MS).toISOString());
  await prune().catch((err) => deps.log.error({ err }, 'the start-up trigger deliveries prune failed'));
  return every(deps, 3600 * 1000, 'trigger deliveries prune', prune);
}
