/**
 * Promo codes (issue 15): the operator creates them from the CLI (`hangar promo create`); an organization admin
 * redeems one for credits, once per organization, and never more times than the code allows, even when many
 * organizations redeem at once (the count moves by a conditional UPDATE in the redemption's transaction).
 * Failed attempts are capped per organization so codes cannot be guessed by trying many.
 */
import { randomInt } from 'node:crypto';
import { sql } from 'kysely';
import { orgId, requireScope, withTx, exec, type Ctx, type Deps } from '../../platform/context.js';
import { isUniqueViolation, uniqueAs } from '../../platform/db/errors.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { stateKey } from '../../platform/state.js';
import { recordActivity } from '../activity/index.js';
import { MICROS_PER_CENT, postEntries } from './ledger.js';

/** No 0/O, 1/I/L: a code read aloud or copied from print is typed right. */
const ALPHABET = 'ABCDEFGHJKMNPQRSTUVWXYZ23456789';
const GENERATED_LENGTH = 12;
const CODE_PATTERN = /^[A-Z0-9-]{4,64}$/;
const MAX_CREDITS_CENTS = 100_000_000;
const MAX_REDEMPTIONS = 10_000_000;

/** Failed redemptions an organization may make in a window before it is refused for the rest of it. */
export const PROMO_FAILURE_LIMIT = 10;
export const PROMO_FAILURE_WINDOW_MS = 60_000;

export interface PromoCode {
  id: string;
  code: string;
  creditsCents: number;
  maxRedemptions: number;
  redemptions: number;
  expiresAt: string | null;
  createdAt: string;
}

export interface CreatePromoInput {
  code?: string;
  creditsCents: number;
  maxRedemptions: number;
  /** An ISO 8601 timestamp, or a date (YYYY-MM-DD): the code is good through the end of that day, UTC. */
  expiresAt?: string;
}

const toPromo = (r: {
  id: string;
  code: string;
  credits_cents: number;
  max_redemptions: number;
  redemptions: number;
  expires_at: string | null;
  created_at: string;
}): PromoCode => ({
  id: r.id,
  code: r.code,
  creditsCents: Number(r.credits_cents),
  maxRedemptions: Number(r.max_redemptions),
  redemptions: Number(r.redemptions),
  expiresAt: r.expires_at,
  createdAt: r.created_at,
});

export function generatePromoCode(): string {
  let s = '';
  for (let i = 0; i < GENERATED_LENGTH; i++) s += ALPHABET[randomInt(ALPHABET.length)];
  return s;
}

const DATE_ONLY = /^(\d{4})-(\d{2})-(\d{2})$/;
const DATE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/;

/** The expiry as stored (UTC ISO); a date alone means the end of that day, UTC. */
function expiryOf(text: string, now: Date): string {
  let at: Date;
  const day = DATE_ONLY.exec(text);
  if (day) {
    const [y, m, d] = [Number(day[1]), Number(day[2]) - 1, Number(day[3])];
    if (new Date(Date.UTC(y, m, d)).toISOString().slice(0, 10) !== text) throw errors.invalidField('expiresAt', `${text} is not a calendar date`);
    at = new Date(Date.UTC(y, m, d + 1));
  } else if (DATE_TIME.test(text)) {
    at = new Date(text);
    if (Number.isNaN(at.getTime())) throw errors.invalidField('expiresAt', `${text} is not a valid time`);
  } else {
    throw errors.invalidField('expiresAt', 'must be an ISO 8601 time with its zone (2027-01-31T12:00:00Z) or a date (2027-01-31)');
  }
  if (at.getTime() <= now.getTime()) throw errors.invalidField('expiresAt', `must be in the future (${at.toISOString()} has passed)`);
  return at.toISOString();
}

/**
 * Creates a promo code (the operator's verb, from the CLI: promo codes belong to the installation, not to an
 * organization, so there is no tenant to scope by). A code given is stored upper-case and must be new.
 */
export async function createPromoCode(deps: Deps, input: CreatePromoInput): Promise<PromoCode> {
  const now = new Date();
  let given: string | undefined;
  if (input.code !== undefined) {
    given = input.code.trim().toUpperCase();
    if (!CODE_PATTERN.test(given)) throw errors.invalidField('code', 'must be 4 to 64 characters of letters, digits and dashes');
  }
  if (!Number.isInteger(input.creditsCents) || input.creditsCents < 1 || input.creditsCents > MAX_CREDITS_CENTS)
    throw errors.invalidField('creditsCents', `must be a whole number of cents from 1 to ${MAX_CREDITS_CENTS}`);
  if (!Number.isInteger(input.maxRedemptions) || input.maxRedemptions < 1 || input.maxRedemptions > MAX_REDEMPTIONS)
    throw errors.invalidField('maxRedemptions', `must be a whole number from 1 to ${MAX_REDEMPTIONS}`);
  const expiresAt = input.expiresAt === undefined ? null : expiryOf(input.expiresAt.trim(), now);

  const insert = (code: string) =>
    deps.db.kysely
      .insertInto('promo_codes')
      .values({
        id: prefixedId('promo'),
        code,
        credits_cents: input.creditsCents,
        max_redemptions: input.maxRedemptions,
        redemptions: 0,
        expires_at: expiresAt,
        created_at: now.toISOString(),
      })
      .returningAll()
      .executeTakeFirstOrThrow();

  if (given !== undefined) {
    const code = given;
    return toPromo(
      await uniqueAs(
        () => insert(code),
        () => errors.conflict(`the promo code ${code} already exists`),
      ),
    );
  }
  // 31^12 codes: a collision is all but impossible, and a fresh draw settles one.
  for (let attempt = 0; ; attempt++) {
    try {
      return toPromo(await insert(generatePromoCode()));
    } catch (err) {
      if (!isUniqueViolation(err) || attempt >= 4) throw err;
    }
  }
}

/** Every promo code, newest first (the operator's listing). */
export async function listPromoCodes(deps: Deps): Promise<PromoCode[]> {
  const rows = await deps.db.kysely.selectFrom('promo_codes').selectAll().orderBy('created_at', 'desc').orderBy('id', 'desc').execute();
  return rows.map(toPromo);
}

/** Failed redemption times per organization, inside the current window. */
const FAILURES = stateKey('billing.promo.failures', () => new Map<string, number[]>());

function recentFailures(deps: Deps, org: string, now: number): number[] {
  const map = deps.state.get(FAILURES);
  const since = now - PROMO_FAILURE_WINDOW_MS;
  if (map.size > 10_000) {
    for (const [k, times] of map) if (times[times.length - 1]! <= since) map.delete(k);
  }
  const times = (map.get(org) ?? []).filter((t) => t > since);
  if (times.length) map.set(org, times);
  else map.delete(org);
  return times;
}

function noteFailure(deps: Deps, org: string, now: number): void {
  const map = deps.state.get(FAILURES);
  map.set(org, [...recentFailures(deps, org, now), now]);
}

export interface Redeemed {
  code: string;
  creditsCents: number;
  balanceCents: number;
}

/**
 * Redeems a promo code for the caller's organization: once per organization, at most `max_redemptions` times
 * in all, never after it expires. The count, the redemption, the ledger entry and the activity are one
 * transaction. An unknown code is a 404 that says nothing more; refused attempts count toward the
 * organization's cap (429 with Retry-After once it has failed too often in a minute).
 */
export async function redeemPromoCode(ctx: Ctx, input: { code: string }): Promise<Redeemed> {
  requireScope(ctx, 'billing:write');
  const org = orgId(ctx);
  const deps = ctx.deps;
  const started = Date.now();
  const failures = recentFailures(deps, org, started);
  if (failures.length >= PROMO_FAILURE_LIMIT) {
    const retryAfter = Math.max(1, Math.ceil((failures[0]! + PROMO_FAILURE_WINDOW_MS - started) / 1000));
    throw errors.rateLimited(
      `too many failed promo code attempts for this organization (${PROMO_FAILURE_LIMIT} a minute); retry in ${retryAfter} s`,
      retryAfter,
    );
  }
  const code = input.code.trim().toUpperCase();
  try {
    return await withTx(ctx, async (tx) => {
      const promo = await exec(tx).selectFrom('promo_codes').selectAll().where('code', '=', code).executeTakeFirst();
      if (!promo) throw errors.notFound('promo code');
      const already = await exec(tx)
        .selectFrom('promo_redemptions')
        .select('id')
        .where('promo_id', '=', promo.id)
        .where('org_id', '=', org)
        .executeTakeFirst();
      if (already) throw errors.conflict('this organization has already redeemed this promo code');
      const now = nowIso();
      const counted = await exec(tx)
        .updateTable('promo_codes')
        .set({ redemptions: sql<number>`redemptions + 1` })
        .where('id', '=', promo.id)
        .where(sql<boolean>`redemptions < max_redemptions`)
        .where((eb) => eb.or([eb('expires_at', 'is', null), eb('expires_at', '>', now)]))
        .executeTakeFirst();
      if (Number(counted.numUpdatedRows) === 0) {
        if (promo.expires_at !== null && promo.expires_at <= now) throw errors.invalidState('this promo code has expired', 'expired');
        throw errors.invalidState('this promo code has been fully redeemed', 'fully_redeemed');
      }
      await uniqueAs(
        () =>
          exec(tx)
            .insertInto('promo_redemptions')
            .values({ id: prefixedId('prr'), promo_id: promo.id, org_id: org, user_id: tx.principal.userId, created_at: now })
            .execute(),
        () => errors.conflict('this organization has already redeemed this promo code'),
      );
      const credits = Number(promo.credits_cents);
      const posted = await postEntries(tx, [
        {
          id: prefixedId('led'),
          orgId: org,
          kind: 'promo',
          amountMicros: credits * MICROS_PER_CENT,
          idempotencyKey: `promo:${promo.id}:${org}`,
          description: `Promo code ${promo.code}`,
          actorUserId: tx.principal.userId,
          metadata: { promoId: promo.id },
        },
      ]);
      // The redemption row is unique per (promo, org), so the key is new; a missing entry would be a broken ledger.
      const account = posted.accounts.find((a) => a.orgId === org);
      if (!account) throw new Error(`the promo credit for ${promo.id} was not posted`);
      await recordActivity(tx, {
        resourceType: 'billing',
        resourceId: org,
        eventType: 'billing.promo.redeemed',
        status: 'redeemed',
        title: 'Promo code redeemed',
        summary: `${promo.code} added ${(credits / 100).toFixed(2)} USD of credits`,
        metadata: { promoId: promo.id, code: promo.code, creditsCents: credits },
      });
      return { code: promo.code, creditsCents: credits, balanceCents: Math.floor(account.balanceMicros / MICROS_PER_CENT) };
    });
  } catch (err) {
    if (err instanceof AppError && (err.code === 'not_found' || err.code === 'conflict' || err.code === 'invalid_state'))
      noteFailure(deps, org, started);
    throw err;
  }
}
