import type { Deps } from '../../platform/context.js';
import { every, type Stoppable } from '../../platform/jobs.js';
import { stopSandboxesOfSilentNodes } from './nodes.js';
import { pauseIdle, reconcile } from './service.js';

const IDLE_SWEEP_MS = 5_000;

/**
 * The sandboxes' background work. On every node: the sandboxes of nodes that went silent are marked stopped (ADR
 * 0024), checked a few times per dead-after window. On a node that runs them: at start-up, this node's records are
 * reconciled with what runc reports; then, every few seconds, sandboxes idle past their timeout are paused.
 */
export async function startSandboxJobs(deps: Deps): Promise<Stoppable> {
  const sweep = every(deps, Math.max(50, Math.floor(deps.config.nodes.deadAfterMs / 4)), 'silent node sweep', () => stopSandboxesOfSilentNodes(deps));
  if (!deps.sandboxes.available) return sweep;
  const r = await reconcile(deps);
  if (r.stopped || r.removed) deps.log.info(r, 'sandboxes reconciled with runc');
  const idle = every(deps, IDLE_SWEEP_MS, 'idle sweep', () => pauseIdle(deps));
  return {
    async stop() {
      await idle.stop();
      await sweep.stop();
    },
  };
}

/** When this node learns it had been declared dead: its records (some now `stopped`) are matched with runc again. */
export async function reconcileAfterRevival(deps: Deps): Promise<void> {
  const r = await reconcile(deps);
  deps.log.info(r, 'sandboxes reconciled with runc after this node was declared dead');
}
