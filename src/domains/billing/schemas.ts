import { z } from 'zod';

export const CreditBalance = z
  .object({
    balanceCents: z.number().int().describe('Whole cents, rounded down'),
    balanceMicros: z.number().int().describe('The exact balance in micro-dollars (1 cent = 10,000)'),
    currency: z.literal('usd'),
    updatedAt: z.string().nullable().describe('Time of the newest ledger entry'),
  })
  .meta({ id: 'CreditBalance' });

export const CreditEntry = z
  .object({
    id: z.string(),
    kind: z.string().describe('`signup_grant`, `plan_grant`, `promo`, `topup`, `auto_topup`, `usage_charge` or `reversal`'),
    amountCents: z.number().int().describe('Positive for credits added, negative for credits used (rounded)'),
    amountMicros: z.number().int().describe('The exact amount in micro-dollars'),
    description: z.string(),
    createdAt: z.string(),
  })
  .meta({ id: 'CreditEntry' });
export type CreditEntry = z.infer<typeof CreditEntry>;

const PerMTok = z.object({ inputPerMTok: z.number(), outputPerMTok: z.number(), cachedInputPerMTok: z.number().optional() });

export const PlanSummary = z
  .object({
    plan: z.object({
      id: z.string(),
      name: z.string(),
      includedMonthlyCents: z.number().int(),
      prices: z.object({
        modelClasses: z.record(z.string(), PerMTok).describe('USD per million tokens by model class; other models at their catalogue price'),
        sandboxVcpuSecondMicros: z.number(),
        sandboxGibSecondMicros: z.number(),
        storageGibMonthMicros: z.number(),
        toolExecutionMicros: z.number(),
        tools: z.record(z.string(), z.number()),
        codeCpuSecondMicros: z.number(),
      }),
      limits: z.object({ runningSandboxes: z.number().int() }),
    }),
    billingEnabled: z.boolean().describe('false when the operator runs with HANGAR_BILLING=off: usage is reported, never charged'),
    period: z.object({ start: z.string(), end: z.string() }).describe('The billing period: the calendar month, UTC'),
    credits: z.object({
      balanceCents: z.number().int(),
      balanceMicros: z.number().int(),
      grantedCents: z.number().int().describe('Sign-up, plan and promo credits, all time'),
      purchasedCents: z.number().int().describe('Top-ups and auto top-ups, all time'),
      spentThisPeriodCents: z.number().int(),
      spentThisPeriodMicros: z.number().int(),
      pendingCents: z.number().int().describe('Estimated cost of sandboxes running now, not yet settled'),
      pendingMicros: z.number().int(),
      availableCents: z.number().int().describe('Balance less pending charges: new work is refused (402) at zero'),
      exhaustedAt: z.string().nullable(),
    }),
    currency: z.literal('usd'),
  })
  .meta({ id: 'BillingPlan' });
export type PlanSummary = z.infer<typeof PlanSummary>;

export const RedeemPromoBody = z.object({ code: z.string().min(1).max(100).describe('The promo code, in any case') });
export type RedeemPromoBody = z.infer<typeof RedeemPromoBody>;

export const PromoRedemption = z
  .object({
    code: z.string().describe('The code redeemed, upper-case'),
    creditsCents: z.number().int().describe('Credits the code added'),
    balanceCents: z.number().int().describe('The balance after the credits were added (whole cents, rounded down)'),
  })
  .meta({ id: 'PromoRedemption' });
