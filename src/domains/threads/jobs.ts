import type { Deps } from '../../platform/context.js';
import type { Stoppable } from '../../platform/jobs.js';
import { repairAll } from './durable.js';

/**
 * The threads' start-up check: threads whose JSONL holds more than their projection (a crash between the two)
 * catch up. It runs in the background (the write path repairs a thread's tail itself before appending);
 * stopping waits for it.
 */
export async function startThreadJobs(deps: Deps): Promise<Stoppable> {
  const check = repairAll(deps)
    .then((n) => n && deps.log.warn({ threads: n }, 'thread projections caught up with their JSONL'))
    .catch((err) => deps.log.error({ err }, 'thread projection check failed'));
  return { stop: async () => void (await check) };
}
