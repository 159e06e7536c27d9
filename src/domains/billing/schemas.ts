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

const cents = (field: string) =>
  z
    .number({ error: `${field} must be a number of US cents` })
    .int({ error: `${field} must be a whole number of cents` })
    .min(0, { error: `${field} must not be negative` })
    .max(100_000_000, { error: `${field} must be at most 100000000 cents` });

export const TopupBody = z
  .object({
    amountCents: cents('amountCents')
      .min(1, { error: 'amountCents must be a positive whole number of cents' })
      .describe('Whole US cents, within the server’s top-up minimum and maximum (HANGAR_BILLING_TOPUP_MIN_CENTS / MAX_CENTS)'),
  })
  .meta({ id: 'TopupBody' });
export type TopupBody = z.infer<typeof TopupBody>;

export const TopupStatus = z.enum(['pending', 'completed', 'failed', 'expired']);

export const TopupCheckout = z
  .object({
    id: z.string(),
    checkoutUrl: z.string().nullable().describe('Where the browser pays; null once the checkout is over'),
    sessionId: z.string().describe('The payment provider’s checkout session id'),
    amountCents: z.number().int(),
    status: TopupStatus,
    expiresAt: z.string().optional().describe('When the checkout expires unpaid (on the answer that created it)'),
  })
  .meta({ id: 'TopupCheckout' });

export const TopupCompletion = z
  .object({
    id: z.string(),
    sessionId: z.string(),
    amountCents: z.number().int(),
    status: z.literal('completed'),
    creditedNow: z.boolean().describe('false when the credits were already added (by the provider’s webhook or an earlier return)'),
    balanceCents: z.number().int(),
  })
  .meta({ id: 'TopupCompletion' });

export const AutoTopupBody = z
  .object({
    enabled: z.boolean({ error: 'enabled must be true or false' }),
    thresholdCents: cents('thresholdCents').describe('A top-up starts when the balance is at or below this'),
    topupAmountCents: cents('topupAmountCents').describe('Charged to the saved card each time; within the top-up minimum and maximum'),
  })
  .meta({ id: 'AutoTopupBody' });
export type AutoTopupBody = z.infer<typeof AutoTopupBody>;

export const AutoTopupSettings = z
  .object({
    enabled: z.boolean(),
    thresholdCents: z.number().int(),
    topupAmountCents: z.number().int(),
    paymentMethodSaved: z.boolean().describe('A card saved by a paid top-up; auto top-up needs one'),
    consecutiveFailures: z.number().int().describe('Declines in a row; at 3 auto top-up turns itself off'),
    pendingTopupId: z.string().nullable().describe('The auto top-up being paid now, if any'),
  })
  .meta({ id: 'AutoTopupSettings' });

export const WebhookAck = z.object({ received: z.literal(true), duplicate: z.boolean() }).meta({ id: 'PaymentWebhookAck' });
