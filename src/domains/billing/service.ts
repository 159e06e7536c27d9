import { sql } from 'kysely';
import { recordActivity } from '../activity/index.js';
import { exec, orgId, requireScope, systemCtx, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { errors } from '../../platform/http/errors.js';
import { newestFirstPage } from '../../platform/db/pages.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { accountRow, ensureAccount, MICROS_PER_CENT, postEntries } from './ledger.js';
import { grantPeriodCredits, planOf } from './meter.js';
import { loadPlans, periodOf } from './plans.js';
import type { CreditEntry, PlanSummary } from './schemas.js';

/** Opens the organization's billing account on the default plan (idempotent; in the caller's transaction). */
export async function openBillingAccount(ctx: Ctx, org: string): Promise<void> {
  await ensureAccount(ctx, org);
}

/**
 * Grants sign-up credits once per user, ever: the ledger's unique idempotency key makes a retried or
 * concurrent sign-up a no-op. Returns whether this call granted them.
 */
export async function grantSignupCredits(ctx: Ctx, org: string, userId: string, amountCents: number): Promise<boolean> {
  if (amountCents <= 0) return false;
  return withTx(ctx, async (tx) => {
    const res = await postEntries(tx, [
      {
        id: prefixedId('led'),
        orgId: org,
        kind: 'signup_grant',
        amountMicros: amountCents * MICROS_PER_CENT,
        idempotencyKey: `signup:${userId}`,
        description: 'Sign-up credits',
        actorUserId: userId,
      },
    ]);
    return res.inserted.length > 0;
  });
}

const cents = (micros: number) => Math.floor(micros / MICROS_PER_CENT);

/** The balance: the account's cache of the ledger's sum, kept in the same transaction as every entry. */
export async function getBalance(ctx: Ctx) {
  requireScope(ctx, 'billing:read');
  const org = orgId(ctx);
  const acc = await accountRow(ctx, org);
  const newest = await exec(ctx)
    .selectFrom('credit_ledger')
    .select(sql<string | null>`max(created_at)`.as('updated'))
    .where('org_id', '=', org)
    .executeTakeFirstOrThrow();
  const micros = Number(acc?.balance_micros ?? 0);
  return { balanceCents: cents(micros), balanceMicros: micros, currency: 'usd' as const, updatedAt: newest.updated };
}

export async function listLedger(ctx: Ctx, input: { limit: number; cursor?: string }) {
  requireScope(ctx, 'billing:read');
  const q = exec(ctx).selectFrom('credit_ledger').selectAll().where('org_id', '=', orgId(ctx));
  const p = await newestFirstPage(q, { time: 'created_at', id: 'id' }, input);
  const items: CreditEntry[] = p.items.map((r) => ({
    id: r.id,
    kind: r.kind,
    amountCents: Number(r.amount_cents),
    amountMicros: Number(r.amount_micros),
    description: r.description,
    createdAt: r.created_at,
  }));
  return { items, hasMore: p.hasMore, nextCursor: p.nextCursor };
}

/** The plan and the credit summary: balance, granted, purchased, spent this period, pending charges. */
export async function getPlan(ctx: Ctx): Promise<PlanSummary> {
  requireScope(ctx, 'billing:read');
  const org = orgId(ctx);
  if (ctx.deps.config.billing.enabled) await withTx(ctx, (tx) => grantPeriodCredits(tx, org));
  const plan = await planOf(ctx, org);
  const acc = await accountRow(ctx, org);
  const period = periodOf();
  const sums = await exec(ctx)
    .selectFrom('credit_ledger')
    .select([
      sql<number>`coalesce(sum(case when kind in ('signup_grant', 'plan_grant', 'promo') then amount_micros else 0 end), 0)`.as('granted'),
      sql<number>`coalesce(sum(case when kind in ('topup', 'auto_topup') then amount_micros else 0 end), 0)`.as('purchased'),
      sql<number>`coalesce(sum(case when kind in ('usage_charge', 'reversal') and created_at >= ${period.start} then -amount_micros else 0 end), 0)`.as(
        'spent',
      ),
    ])
    .where('org_id', '=', org)
    .executeTakeFirstOrThrow();
  const balance = Number(acc?.balance_micros ?? 0);
  const pending = Number(acc?.pending_micros ?? 0);
  return {
    plan: {
      id: plan.id,
      name: plan.name,
      includedMonthlyCents: plan.includedMonthlyCents,
      prices: plan.prices,
      limits: { runningSandboxes: plan.limits.runningSandboxes ?? ctx.deps.config.sandboxes.maxRunningPerOrg },
    },
    billingEnabled: ctx.deps.config.billing.enabled,
    period: { start: period.start, end: period.end },
    credits: {
      balanceCents: cents(balance),
      balanceMicros: balance,
      grantedCents: cents(Number(sums.granted)),
      purchasedCents: cents(Number(sums.purchased)),
      spentThisPeriodCents: Math.ceil(Number(sums.spent) / MICROS_PER_CENT),
      spentThisPeriodMicros: Number(sums.spent),
      pendingCents: Math.ceil(pending / MICROS_PER_CENT),
      pendingMicros: pending,
      availableCents: cents(balance - pending),
      exhaustedAt: acc?.exhausted_at ?? null,
    },
    currency: 'usd',
  };
}

/**
 * Puts an organization on a plan (operator only: the CLI's `hangar plans assign`). The new plan's included
 * credits for the current period are granted at once (once per period, whatever the plan).
 */
export async function assignPlan(deps: Deps, input: { orgId: string; plan: string }): Promise<{ orgId: string; plan: string; previous: string }> {
  const plans = loadPlans(deps);
  if (!plans.has(input.plan)) throw errors.invalidField('plan', `no plan "${input.plan}" (the plans are: ${[...plans.keys()].join(', ')})`);
  const ctx = systemCtx(deps, { userId: 'system', orgId: input.orgId, role: 'admin', scopes: new Set(), apiKeyId: null });
  return withTx(ctx, async (tx) => {
    const org = await exec(tx).selectFrom('billing_accounts').select('plan').where('org_id', '=', input.orgId).executeTakeFirst();
    if (!org) throw errors.notFound('organization', input.orgId);
    await exec(tx).updateTable('billing_accounts').set({ plan: input.plan, updated_at: nowIso() }).where('org_id', '=', input.orgId).execute();
    await recordActivity(
      tx,
      {
        resourceType: 'billing',
        resourceId: input.orgId,
        eventType: 'billing.plan.changed',
        status: 'changed',
        title: `Plan changed to ${plans.get(input.plan)!.name}`,
        summary: `from ${org.plan} to ${input.plan}`,
        metadata: { from: org.plan, to: input.plan },
      },
      input.orgId,
    );
    if (deps.config.billing.enabled) await grantPeriodCredits(tx, input.orgId);
    return { orgId: input.orgId, plan: input.plan, previous: org.plan };
  });
}

/** The plans an operator offers (the CLI's `hangar plans list`). */
export function listPlans(deps: Deps) {
  return [...loadPlans(deps).values()];
}
