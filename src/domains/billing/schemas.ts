import { z } from 'zod';

export const CreditBalance = z
  .object({
    balanceCents: z.number().int(),
    currency: z.literal('usd'),
    updatedAt: z.string().nullable().describe('Time of the newest ledger entry'),
  })
  .meta({ id: 'CreditBalance' });

export const CreditEntry = z
  .object({
    id: z.string(),
    kind: z.string().describe('e.g. `signup_grant`'),
    amountCents: z.number().int().describe('Positive for credits added, negative for credits used'),
    description: z.string(),
    createdAt: z.string(),
  })
  .meta({ id: 'CreditEntry' });
export type CreditEntry = z.infer<typeof CreditEntry>;
