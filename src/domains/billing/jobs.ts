import type { Deps } from '../../platform/context.js';
import { every, type Stoppable } from '../../platform/jobs.js';
import { settleUsage } from './meter.js';
import { loadPlans } from './plans.js';
import { registerAutoTopup } from './topups.js';

/**
 * Billing's background work: the plans are checked at start-up (a bad plans file stops it), what a crash left
 * due is charged at once, and then swept every HANGAR_BILLING_SETTLE_MS; auto top-up is registered as after-charge work.
 */
export async function startBillingJobs(deps: Deps): Promise<Stoppable> {
  loadPlans(deps);
  // Auto top-up runs after every charge this process makes (the sweep's included).
  registerAutoTopup(deps);
  const sweep = async () => {
    while ((await settleUsage(deps, { limit: 500 })) === 500) {
      /* more due than one batch: go on */
    }
  };
  await sweep();
  const jobs: Stoppable[] = [every(deps, deps.config.billing.settleMs, 'billing sweep', sweep)];
  return {
    async stop() {
      for (const j of jobs.reverse()) await j.stop();
    },
  };
}
