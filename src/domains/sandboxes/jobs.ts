import type { Deps } from '../../platform/context.js';
import { every, nothingToStop, type Stoppable } from '../../platform/jobs.js';
import { pauseIdle, reconcile } from './service.js';

const IDLE_SWEEP_MS = 5_000;

/**
 * The sandboxes' background work on a node that runs them: at start-up, this node's records are reconciled with
 * what runc reports; then, every few seconds, sandboxes idle past their timeout are paused.
 */
export async function startSandboxJobs(deps: Deps): Promise<Stoppable> {
  if (!deps.sandboxes.available) return nothingToStop;
  const r = await reconcile(deps);
  if (r.stopped || r.removed) deps.log.info(r, 'sandboxes reconciled with runc');
  return every(deps, IDLE_SWEEP_MS, 'idle sweep', () => pauseIdle(deps));
}
