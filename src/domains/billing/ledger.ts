/**
 * The credit ledger (ADR 0028). Entries are append-only, one per idempotency key; a correction is a reversing
 * entry. Every insert updates the organization's balance cache (`billing_accounts.balance_micros`) in the same
 * transaction, by exactly the amounts of the rows that were inserted (a retried or concurrent post of the same
 * key inserts nothing and adds nothing), so the balance always equals the sum of the entries.
 */
import { sql } from 'kysely';
import { exec, type Ctx } from '../../platform/context.js';
import { nowIso } from '../../platform/ids.js';

export type LedgerKind = 'signup_grant' | 'plan_grant' | 'promo' | 'topup' | 'auto_topup' | 'usage_charge' | 'reversal';

export interface LedgerEntryInput {
  /** Deterministic where the entry answers to something (a meter event, a checkout session): it is the entry's id. */
  id: string;
  orgId: string;
  kind: LedgerKind;
  /** Micro-dollars: positive adds credits, negative spends them. */
  amountMicros: number;
  idempotencyKey: string;
  description: string;
  actorUserId?: string | null;
  metadata?: Record<string, unknown> | null;
}

export interface AccountAfter {
  orgId: string;
  balanceMicros: number;
  /** The balance reached zero or below with this post (it was above before). */
  exhaustedNow: boolean;
}

export const MICROS_PER_CENT = 10_000;

/** Opens an organization's billing account (idempotent): its plan and a zero balance. */
export async function ensureAccount(ctx: Ctx, org: string): Promise<void> {
  const now = nowIso();
  await exec(ctx)
    .insertInto('billing_accounts')
    .values({
      org_id: org,
      plan: ctx.deps.config.billing.defaultPlan,
      balance_micros: 0,
      pending_micros: 0,
      exhausted_at: null,
      payment_customer_id: null,
      payment_method_id: null,
      auto_topup_enabled: 0,
      auto_topup_threshold_cents: 0,
      auto_topup_amount_cents: 0,
      auto_topup_failures: 0,
      created_at: now,
      updated_at: now,
    })
    .onConflict((oc) => oc.column('org_id').doNothing())
    .execute();
}

/**
 * Appends entries (inside the caller's transaction) and moves each organization's balance by what was inserted.
 * Returns the entries inserted (a key already in the ledger is skipped) and each touched account's new balance.
 */
export async function postEntries(ctx: Ctx, entries: readonly LedgerEntryInput[]): Promise<{ inserted: string[]; accounts: AccountAfter[] }> {
  if (!ctx.trx) throw new Error('postEntries must run inside a transaction');
  if (entries.length === 0) return { inserted: [], accounts: [] };
  const now = nowIso();
  const inserted: { id: string; org_id: string; amount_micros: number }[] = [];
  for (let i = 0; i < entries.length; i += 400) {
    const chunk = entries.slice(i, i + 400);
    const rows = await exec(ctx)
      .insertInto('credit_ledger')
      .values(
        chunk.map((e) => ({
          id: e.id,
          org_id: e.orgId,
          kind: e.kind,
          amount_cents: Math.round(e.amountMicros / MICROS_PER_CENT),
          amount_micros: Math.round(e.amountMicros),
          idempotency_key: e.idempotencyKey,
          description: e.description,
          actor_user_id: e.actorUserId ?? null,
          metadata: e.metadata ? JSON.stringify(e.metadata) : null,
          created_at: now,
        })),
      )
      .onConflict((oc) => oc.column('idempotency_key').doNothing())
      .returning(['id', 'org_id', 'amount_micros'])
      .execute();
    inserted.push(...rows);
  }
  const delta = new Map<string, number>();
  for (const r of inserted) delta.set(r.org_id, (delta.get(r.org_id) ?? 0) + Number(r.amount_micros));
  const accounts: AccountAfter[] = [];
  for (const [org, d] of delta) {
    await ensureAccount(ctx, org);
    const row = await exec(ctx)
      .updateTable('billing_accounts')
      .set({
        balance_micros: sql<number>`balance_micros + ${d}`,
        exhausted_at: sql<string | null>`CASE WHEN balance_micros + ${d} <= 0 THEN COALESCE(exhausted_at, ${now}) ELSE NULL END`,
        updated_at: now,
      })
      .where('org_id', '=', org)
      .returning(['balance_micros'])
      .executeTakeFirstOrThrow();
    // The update is atomic under the row's lock: the balance before it was exactly `after - d`.
    const after = Number(row.balance_micros);
    accounts.push({ orgId: org, balanceMicros: after, exhaustedNow: after <= 0 && after - d > 0 });
  }
  return { inserted: inserted.map((r) => r.id), accounts };
}

export async function accountRow(ctx: Ctx, org: string) {
  return exec(ctx).selectFrom('billing_accounts').selectAll().where('org_id', '=', org).executeTakeFirst();
}
