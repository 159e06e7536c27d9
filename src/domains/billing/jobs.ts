import type { Deps } from '../../platform/context.js';
import { every, nothingToStop, type Stoppable } from '../../platform/jobs.js';
import { enforceCreditGrace, graceSweepMs } from './grace.js';
import { settleUsage } from './meter.js';
import { loadPlans } from './plans.js';
import { refreshRuntime } from './runtime.js';

/**
 * Billing's background work: the plans are checked at start-up (a bad plans file stops it), what a crash left
 * due is charged at once, and then swept every HANGAR_BILLING_SETTLE_MS. Running sandboxes' pending charges are
 * re-estimated (and split at the end of a billing period) every HANGAR_BILLING_RUNTIME_UPDATE_MS (runtime.ts).
 */
export async function startBillingJobs(deps: Deps): Promise<Stoppable> {
  loadPlans(deps);
  const sweep = async () => {
    while ((await settleUsage(deps, { limit: 500 })) === 500) {
      /* more due than one batch: go on */
    }
  };
  await sweep();
  const jobs: Stoppable[] = [
    every(deps, deps.config.billing.settleMs, 'billing sweep', sweep),
    every(deps, deps.config.billing.runtimeUpdateMs, 'runtime estimate', () => refreshRuntime(deps)),
  ];
  return {
    async stop() {
      for (const j of jobs.reverse()) await j.stop();
    },
  };
}

/**
 * The exhaustion grace's sweep (grace.ts). It runs where the work it triggers lives: app.ts starts it with the
 * orchestrator, whose every node pauses its own sandboxes. Nothing runs with HANGAR_BILLING=off.
 */
export async function startCreditGraceJobs(deps: Deps): Promise<Stoppable> {
  if (!deps.config.billing.enabled) return nothingToStop;
  return every(deps, graceSweepMs(deps.config), 'credit grace sweep', () => enforceCreditGrace(deps));
}
