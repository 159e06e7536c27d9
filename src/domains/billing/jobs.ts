import { exec, systemCtx, withTx, type Deps } from '../../platform/context.js';
import { every, nothingToStop, recurring, type Stoppable } from '../../platform/jobs.js';
import { storageOrgs, takeStorageByteSeconds } from '../storage/index.js';
import { enforceCreditGrace, graceSweepMs } from './grace.js';
import { recordUsage, settleAfterCommit, settleUsage } from './meter.js';
import { loadPlans } from './plans.js';
import { refreshRuntime } from './runtime.js';
import { resumeStaleAutoTopups } from './topups.js';

/**
 * Billing's background work: the plans are checked at start-up (a bad plans file stops it), what a crash left
 * due is charged at once, and then swept every HANGAR_BILLING_SETTLE_MS. Running sandboxes' pending charges are
 * re-estimated (and split at the end of a billing period) every HANGAR_BILLING_RUNTIME_UPDATE_MS (runtime.ts);
 * workspace storage is charged every HANGAR_BILLING_STORAGE_CHARGE_MS; auto top-ups a crash left pending are
 * finished every minute (these three on the job engine, once per tick across replicas, where the period allows) (auto top-up itself is after-charge work that app.ts registers in every process).
 */
export async function startBillingJobs(deps: Deps): Promise<Stoppable> {
  loadPlans(deps);
  // Auto top-up runs after every charge this process makes (the sweep's included).
  const sweep = async () => {
    while ((await settleUsage(deps, { limit: 500 })) === 500) {
      /* more due than one batch: go on */
    }
  };
  await sweep();
  const { billing } = deps.config;
  const jobs: Stoppable[] = [
    // A backstop of the charges made after each commit, every few seconds: a per-process timer (ADR 0032).
    every(deps, billing.settleMs, 'billing sweep', sweep),
    // Installation-wide rounds: once per tick across replicas on the job engine (recurring).
    await recurring(deps, 'billing.runtime_estimate', billing.runtimeUpdateMs, () => refreshRuntime(deps)),
    await recurring(deps, 'billing.storage_charge', billing.storageChargeMs, () => chargeStorageUsage(deps), { timeoutMs: 60 * 60_000 }),
    await recurring(deps, 'billing.stale_auto_topups', 60_000, () => resumeStaleAutoTopups(deps)),
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

/**
 * Charges each organization's workspace storage up to `until`: in one transaction per organization, the
 * byte-seconds stored since the last charge are taken from the storage meter (which starts again at zero) and
 * metered as one `storage` usage event (none when nothing was stored); the events are charged after the commits.
 * Returns how many events were metered.
 */
export async function chargeStorageUsage(deps: Deps, until: Date = new Date()): Promise<number> {
  const system = systemCtx(deps, { userId: 'system', orgId: null, role: null, scopes: new Set(), apiKeyId: null });
  const endedAt = until.toISOString();
  const events: string[] = [];
  for (const org of await storageOrgs(system)) {
    const ctx = systemCtx(deps, { userId: 'system', orgId: org, role: null, scopes: new Set(), apiKeyId: null });
    try {
      const id = await withTx(ctx, async (tx) => {
        const taken = await takeStorageByteSeconds(tx, org, until);
        if (taken.byteSeconds <= 0) return null;
        // The interval charged starts where the previous storage charge ended (else where the meter was last moved).
        const previous = await exec(tx)
          .selectFrom('usage_events')
          .select('ended_at')
          .where('org_id', '=', org)
          .where('kind', '=', 'storage')
          .orderBy('ended_at', 'desc')
          .limit(1)
          .executeTakeFirst();
        return recordUsage(tx, {
          kind: 'storage',
          orgId: org,
          userId: null,
          sourceId: `storage:${org}:${endedAt}`,
          byteSeconds: taken.byteSeconds,
          startedAt: previous?.ended_at ?? taken.from ?? endedAt,
          endedAt,
        });
      });
      if (id) events.push(id);
    } catch (err) {
      deps.log.warn({ err, orgId: org }, 'charging workspace storage failed; the next round takes it');
    }
  }
  for (let i = 0; i < events.length; i += 400) await settleAfterCommit(deps, events.slice(i, i + 400));
  return events.length;
}
