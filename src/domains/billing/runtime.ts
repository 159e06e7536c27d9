/**
 * Sandbox runtime charging (ADR 0028): two phases, each transition exactly once.
 *
 * The sandboxes domain owns the running intervals (`sandbox_runtime`); billing owns their charges. When an interval
 * opens, the sandboxes domain meters it in the same transaction with `recordUsage` as a `pending` event (its source
 * id is the interval's id, its size in the event's metadata). While it is pending, the runtime job
 * (`refreshRuntime`, every HANGAR_BILLING_RUNTIME_UPDATE_MS) re-estimates it: seconds since its start, priced by
 * the organization's plan. When the interval closes, `finishRuntime` moves it, in the closing transaction, to `due`
 * (the final seconds and cost; the caller settles it after the commit) or to `forgiven` (the platform failed the
 * sandbox: the cost is kept for display, nothing is charged). Every move is an UPDATE guarded by
 * `state = 'pending'`, so of two closes, two replicas or a close racing the job, exactly one moves it.
 *
 * Billing periods (calendar months, UTC) are closed in billing alone: a pending event that started before the
 * current period is split. The part up to the end of its first period becomes its own `due` event, with source id
 * `<interval id>:<period key>` (unique, so a repeat inserts nothing), and the pending event's `started_at` moves to
 * that period's end, its seconds counted from there on; the move is guarded by the start it read, so it happens
 * once. This repeats until the event starts inside the current period (a job that did not run for two months
 * splits twice). The parts cover the interval end to end without overlap, so the total charged for an interval is
 * its full duration: sum of the parts' (period end - part start) plus the last event's (end - period start).
 *
 * `billing_accounts.pending_micros` is the sum of the estimated costs of the organization's pending events. It is
 * recomputed per organization from `usage_events`, in the same transaction as every change of a pending event,
 * rather than moved by deltas: there is one pending event per running sandbox, so the sum is a few rows, and a
 * recomputed value cannot drift (a delta lost to a bug or a manual fix would stay wrong forever; a recomputation
 * heals at the next change or job run). The account row is locked first (an UPDATE of it), so on PostgreSQL two
 * transactions changing one organization's pending events take turns, and the second one's sum (a later
 * statement, a later snapshot) sees the first one's commit.
 */
import { sql } from 'kysely';
import { exec, systemCtx, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { nowIso } from '../../platform/ids.js';
import { planOf, priceOf, recordUsage, ROLLED_COLUMNS, rollUp, settleAfterCommit } from './meter.js';
import { periodOf, roundMicros, type Plan } from './plans.js';

interface PendingRuntime {
  id: string;
  org_id: string;
  user_id: string | null;
  source_id: string;
  subject: string;
  started_at: string;
  metadata: string | null;
}

const COLUMNS = ['id', 'org_id', 'user_id', 'source_id', 'subject', 'started_at', 'metadata'] as const;

function sizeOf(ev: PendingRuntime): { cpu: number; memoryMb: number } {
  const m = (ev.metadata ? JSON.parse(ev.metadata) : {}) as { cpu?: unknown; memoryMb?: unknown };
  // recordUsage writes both for every sandbox_runtime event.
  if (typeof m.cpu !== 'number' || typeof m.memoryMb !== 'number') throw new Error(`usage event ${ev.id} does not record its sandbox's size`);
  return { cpu: m.cpu, memoryMb: m.memoryMb };
}

const secondsBetween = (from: string, to: string): number => Math.max(0, (Date.parse(to) - Date.parse(from)) / 1000);

function costOf(plan: Plan, ev: PendingRuntime, seconds: number): number {
  return roundMicros(
    priceOf(plan, {
      kind: 'sandbox_runtime',
      orgId: ev.org_id,
      userId: ev.user_id,
      sourceId: ev.source_id,
      sandboxId: ev.subject,
      ...sizeOf(ev),
      seconds,
      startedAt: ev.started_at,
      endedAt: null,
      state: 'pending',
    }),
  );
}

/** Locks the organization's account row for the rest of the transaction (see the header). */
async function lockAccount(ctx: Ctx, org: string): Promise<void> {
  await exec(ctx).updateTable('billing_accounts').set({ updated_at: nowIso() }).where('org_id', '=', org).execute();
}

/** pending_micros := the sum of the organization's pending events' estimates (see the header). */
async function recomputePending(ctx: Ctx, org: string): Promise<void> {
  await exec(ctx)
    .updateTable('billing_accounts')
    .set({
      pending_micros: sql<number>`(SELECT coalesce(sum(cost_micros), 0) FROM usage_events WHERE org_id = ${org} AND state = 'pending')`,
    })
    .where('org_id', '=', org)
    .execute();
}

/**
 * Splits a pending event at the billing periods that ended before `until` (see the header). Returns the due
 * parts created, and the event as it now stands (null when another transaction moved it meanwhile).
 */
async function splitAtPeriods(ctx: Ctx, first: PendingRuntime, until: Date): Promise<{ due: string[]; event: PendingRuntime | null }> {
  const due: string[] = [];
  const current = Date.parse(periodOf(until).start);
  let ev = first;
  while (Date.parse(ev.started_at) < current) {
    const period = periodOf(new Date(ev.started_at));
    const moved = await exec(ctx)
      .updateTable('usage_events')
      .set({ started_at: period.end, quantity: 0, cost_micros: 0, updated_at: nowIso() })
      .where('id', '=', ev.id)
      .where('state', '=', 'pending')
      .where('started_at', '=', ev.started_at)
      .executeTakeFirst();
    if (Number(moved.numUpdatedRows) !== 1) return { due, event: null };
    const part = await recordUsage(ctx, {
      kind: 'sandbox_runtime',
      orgId: ev.org_id,
      userId: ev.user_id,
      sourceId: `${ev.source_id}:${period.key}`,
      sandboxId: ev.subject,
      ...sizeOf(ev),
      seconds: secondsBetween(ev.started_at, period.end),
      startedAt: ev.started_at,
      endedAt: period.end,
      state: 'due',
      metadata: { intervalId: ev.source_id, period: period.key },
    });
    if (part) due.push(part);
    ev = { ...ev, started_at: period.end };
  }
  return { due, event: ev };
}

async function pendingEvent(ctx: Ctx, org: string, sourceId: string): Promise<PendingRuntime | undefined> {
  return exec(ctx)
    .selectFrom('usage_events')
    .select(COLUMNS)
    .where('kind', '=', 'sandbox_runtime')
    .where('source_id', '=', sourceId)
    .where('org_id', '=', org)
    .where('state', '=', 'pending')
    .executeTakeFirst();
}

/**
 * Ends a running interval's charge inside the caller's transaction: `due` with its final seconds and cost (the
 * caller settles it after the commit with `settleAfterCommit`), or `forgiven` (its cost kept for display, never
 * charged). The seconds are counted from the event's own start, which a period split may have moved to the start
 * of the current period (the earlier part is its own event), so the caller gives only when the interval ended.
 * Returns the event's id when this call moved it; null when it was not pending (already finished, or unknown).
 * Parts of earlier periods that this call splits off are `due` and charged by the billing sweep.
 */
export async function finishRuntime(
  ctx: Ctx,
  org: string,
  sourceId: string,
  end: { endedAt: string; outcome: 'due' | 'forgiven' },
): Promise<string | null> {
  const plan = await planOf(ctx, org); // opens the account if it has none, so the lock below has a row
  await lockAccount(ctx, org);
  const found = await pendingEvent(ctx, org, sourceId);
  if (!found) return null;
  const { event } = await splitAtPeriods(ctx, found, new Date(end.endedAt));
  if (!event) return null;
  const seconds = secondsBetween(event.started_at, end.endedAt);
  const res = await exec(ctx)
    .updateTable('usage_events')
    .set({ state: end.outcome, quantity: seconds, cost_micros: costOf(plan, event, seconds), ended_at: end.endedAt, updated_at: nowIso() })
    .where('id', '=', event.id)
    .where('org_id', '=', org)
    .where('kind', '=', 'sandbox_runtime')
    .where('state', '=', 'pending')
    .executeTakeFirst();
  if (Number(res.numUpdatedRows) !== 1) return null;
  if (end.outcome === 'forgiven') {
    // Final now (a due one becomes final when it is settled): into the daily sums, in this transaction.
    const row = await exec(ctx)
      .selectFrom('usage_events')
      .select(ROLLED_COLUMNS)
      .where('id', '=', event.id)
      .where('org_id', '=', org)
      .executeTakeFirstOrThrow();
    await rollUp(ctx, [{ ...row, state: 'forgiven' }]);
  }
  await recomputePending(ctx, org);
  return event.id;
}

/**
 * The runtime job: every pending runtime event is split at the periods that ended and re-estimated at `at`
 * (seconds since its start, priced by the organization's plan), and each organization's pending total
 * recomputed, one transaction per organization. Accounts showing a pending total without pending events are
 * put right too. The parts split off are charged after the commits. Returns the events re-estimated.
 */
export async function refreshRuntime(deps: Deps, at: Date = new Date()): Promise<number> {
  const ctx = systemCtx(deps, { userId: 'system', orgId: null, role: null, scopes: new Set(), apiKeyId: null });
  const orgs = await deps.db.kysely
    .selectFrom('usage_events')
    .select('org_id')
    .distinct()
    .where('kind', '=', 'sandbox_runtime')
    .where('state', '=', 'pending')
    .execute();
  const stale = await deps.db.kysely.selectFrom('billing_accounts').select('org_id').where('pending_micros', '<>', 0).execute();
  const all = new Set([...orgs.map((o) => o.org_id), ...stale.map((o) => o.org_id)]);
  const due: string[] = [];
  let updated = 0;
  const iso = at.toISOString();
  for (const org of all) {
    await withTx(ctx, async (tx) => {
      const plan = await planOf(tx, org);
      await lockAccount(tx, org);
      const events = await exec(tx)
        .selectFrom('usage_events')
        .select(COLUMNS)
        .where('org_id', '=', org)
        .where('kind', '=', 'sandbox_runtime')
        .where('state', '=', 'pending')
        .execute();
      for (const found of events) {
        const { due: parts, event } = await splitAtPeriods(tx, found, at);
        due.push(...parts);
        if (!event) continue;
        const seconds = secondsBetween(event.started_at, iso);
        const res = await exec(tx)
          .updateTable('usage_events')
          .set({ quantity: seconds, cost_micros: costOf(plan, event, seconds), updated_at: nowIso() })
          .where('id', '=', event.id)
          .where('state', '=', 'pending')
          .where('started_at', '=', event.started_at)
          .executeTakeFirst();
        updated += Number(res.numUpdatedRows);
      }
      await recomputePending(tx, org);
    });
  }
  await settleAfterCommit(deps, due);
  return updated;
}
