/**
 * Credit limits (ADR 0028): with no credit left, new platform-model calls, runs, code executions and sandbox
 * starts and resumes are refused with 402 `insufficient_credits`, unless an auto top-up can still run (it is on,
 * a payment method is saved, and it has not failed three times in a row). BYOK model calls are never refused.
 * With HANGAR_BILLING=off nothing is refused.
 */
import { exec, type Ctx } from '../../platform/context.js';
import { AppError } from '../../platform/http/errors.js';
import { MICROS_PER_CENT } from './ledger.js';
import { planById } from './plans.js';

export const AUTO_TOPUP_MAX_FAILURES = 3;

/** Whether an auto top-up could still be started for this account. */
export function autoTopupCanRun(acc: { auto_topup_enabled: number; payment_method_id: string | null; auto_topup_failures: number }): boolean {
  return acc.auto_topup_enabled === 1 && acc.payment_method_id !== null && acc.auto_topup_failures < AUTO_TOPUP_MAX_FAILURES;
}

/**
 * Refuses `what` (e.g. "this run") with 402 when the organization has no credit left: its balance less the
 * pending runtime estimate is zero or below. One indexed read of the account row.
 */
export async function requireCredits(ctx: Ctx, org: string, what: string): Promise<void> {
  if (!ctx.deps.config.billing.enabled) return;
  const acc = await exec(ctx)
    .selectFrom('billing_accounts')
    .select(['balance_micros', 'pending_micros', 'auto_topup_enabled', 'payment_method_id', 'auto_topup_failures'])
    .where('org_id', '=', org)
    .executeTakeFirst();
  if (!acc) return; // an organization without an account has never been charged (its account opens with its first entry)
  const balance = Number(acc.balance_micros);
  const available = balance - Number(acc.pending_micros);
  if (available > 0 || autoTopupCanRun(acc)) return;
  const cents = Math.floor(available / MICROS_PER_CENT);
  throw new AppError(
    'insufficient_credits',
    `${what} needs credits and the organization has none left (available: ${cents} cents); an organization admin can add credits with POST /v1/billing/topup or redeem a promo code. Models used with your own provider key (BYOK) keep working`,
    { balanceCents: Math.floor(balance / MICROS_PER_CENT), availableCents: cents },
  );
}

/**
 * The organization's plan limits: its plan's running-sandbox limit, or the server's (HANGAR_SANDBOX_MAX_RUNNING)
 * where the plan sets none. A read only: an organization without an account is on the default plan.
 */
export async function planLimits(ctx: Ctx, org: string): Promise<{ runningSandboxes: number }> {
  const acc = await exec(ctx).selectFrom('billing_accounts').select('plan').where('org_id', '=', org).executeTakeFirst();
  const plan = planById(ctx.deps, acc?.plan ?? ctx.deps.config.billing.defaultPlan);
  return { runningSandboxes: plan.limits.runningSandboxes ?? ctx.deps.config.sandboxes.maxRunningPerOrg };
}
