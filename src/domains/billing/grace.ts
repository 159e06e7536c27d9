/**
 * The exhaustion grace (ADR 0028): what is already running when an organization's credits run out (its running
 * sandboxes) keeps running for HANGAR_BILLING_GRACE_SECONDS after `billing_accounts.exhausted_at`; then the work
 * other domains registered with `onCreditsExhausted` runs (app.ts registers the sandboxes domain's pause: paused,
 * never destroyed). Billing knows no sandbox: the dependency is passed in, as ADR 0019 asks of one that would
 * point backwards (sandboxes ask billing for credits).
 *
 * Once per exhaustion and per process: each node pauses the sandboxes it runs, so the marker is this process's
 * (`${org}@${exhausted_at}` in deps.state), not a shared row; a restart handles each current exhaustion once more,
 * which is a no-op for an organization with nothing running. A new exhaustion (credits added, then spent again)
 * has a new `exhausted_at` and is handled again.
 */
import type { Config } from '../../config.js';
import type { Deps } from '../../platform/context.js';
import { stateKey } from '../../platform/state.js';
import { autoTopupCanRun } from './limits.js';

export type ExhaustionHandler = (deps: Deps, orgId: string) => Promise<void>;

const GRACE_STATE = stateKey('billing-grace', () => ({
  handlers: [] as ExhaustionHandler[],
  /** Exhaustions (`${org}@${exhausted_at}`) whose handlers all succeeded in this process. */
  handled: new Set<string>(),
}));

/** Registers work to do once an organization's grace after running out of credits is over (app.ts). */
export function onCreditsExhausted(deps: Deps, fn: ExhaustionHandler): void {
  deps.state.get(GRACE_STATE).handlers.push(fn);
}

/** How often the grace is checked: twice per grace, at most every 30 s, at least every 250 ms. */
export function graceSweepMs(config: Pick<Config, 'billing'>): number {
  return Math.min(30_000, Math.max(250, config.billing.graceSeconds * 500));
}

/**
 * Runs the registered work for every organization whose credits ran out more than the grace ago and are still
 * out (no credit available and no auto top-up that could still run), once per exhaustion. A handler's failure
 * is logged and retried on the next round. Returns the organizations acted on this round.
 */
export async function enforceCreditGrace(deps: Deps, now = new Date()): Promise<string[]> {
  if (!deps.config.billing.enabled) return [];
  const slot = deps.state.get(GRACE_STATE);
  if (slot.handlers.length === 0) return [];
  const cutoff = new Date(now.getTime() - deps.config.billing.graceSeconds * 1000).toISOString();
  // Every organization's account: this is the system's sweep, not a caller's read.
  const rows = await deps.db.kysely
    .selectFrom('billing_accounts')
    .select(['org_id', 'exhausted_at', 'balance_micros', 'pending_micros', 'auto_topup_enabled', 'payment_method_id', 'auto_topup_failures'])
    .where('exhausted_at', 'is not', null)
    .where('exhausted_at', '<=', cutoff)
    .execute();
  const current = new Set<string>();
  const acted: string[] = [];
  for (const r of rows) {
    if (Number(r.balance_micros) - Number(r.pending_micros) > 0 || autoTopupCanRun(r)) continue;
    const key = `${r.org_id}@${r.exhausted_at}`;
    current.add(key);
    if (slot.handled.has(key)) continue;
    let ok = true;
    for (const fn of slot.handlers) {
      await fn(deps, r.org_id).catch((err) => {
        ok = false;
        deps.log.warn({ err, orgId: r.org_id }, 'work after credits ran out failed; retrying on the next round');
      });
    }
    if (ok) slot.handled.add(key);
    acted.push(r.org_id);
  }
  // Only current exhaustions are remembered: one that ended (credits added) is forgotten.
  for (const k of slot.handled) if (!current.has(k)) slot.handled.delete(k);
  return acted;
}
