import { sql } from 'kysely';
import { exec, orgId, requireScope, type Ctx } from '../../platform/context.js';
import { newestFirstPage } from '../../platform/db/pages.js';
import { nowIso, uuid } from '../../platform/ids.js';
import type { CreditEntry } from './schemas.js';

/**
 * Grants sign-up credits once per user, ever: the ledger's unique idempotency key makes a retried or
 * concurrent sign-up a no-op. Returns whether this call granted them.
 */
export async function grantSignupCredits(ctx: Ctx, org: string, userId: string, amountCents: number): Promise<boolean> {
  if (amountCents <= 0) return false;
  const result = await exec(ctx)
    .insertInto('credit_ledger')
    .values({
      id: uuid(),
      org_id: org,
      kind: 'signup_grant',
      amount_cents: amountCents,
      idempotency_key: `signup:${userId}`,
      description: 'Sign-up credits',
      actor_user_id: userId,
      metadata: null,
      created_at: nowIso(),
    })
    .onConflict((oc) => oc.column('idempotency_key').doNothing())
    .executeTakeFirst();
  return Number(result.numInsertedOrUpdatedRows ?? 0) > 0;
}

/** The balance is derived from the append-only ledger, never stored apart from it. */
export async function getBalance(ctx: Ctx) {
  requireScope(ctx, 'billing:read');
  const row = await exec(ctx)
    .selectFrom('credit_ledger')
    .select([sql<number>`coalesce(sum(amount_cents), 0)`.as('balance'), sql<string | null>`max(created_at)`.as('updated')])
    .where('org_id', '=', orgId(ctx))
    .executeTakeFirstOrThrow();
  return { balanceCents: Number(row.balance), currency: 'usd' as const, updatedAt: row.updated };
}

export async function listLedger(ctx: Ctx, input: { limit: number; cursor?: string }) {
  requireScope(ctx, 'billing:read');
  const q = exec(ctx).selectFrom('credit_ledger').selectAll().where('org_id', '=', orgId(ctx));
  const p = await newestFirstPage(q, { time: 'created_at', id: 'id' }, input);
  const items: CreditEntry[] = p.items.map((r) => ({
    id: r.id,
    kind: r.kind,
    amountCents: Number(r.amount_cents),
    description: r.description,
    createdAt: r.created_at,
  }));
  return { items, hasMore: p.hasMore, nextCursor: p.nextCursor };
}
