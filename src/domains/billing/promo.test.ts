import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectActivity } from '../../../test/activity.js';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { securitySuite } from '../../../test/security.js';
import { systemCtx } from '../../platform/context.js';
import { AppError } from '../../platform/http/errors.js';
import { ROLE_SCOPES } from '../../platform/scopes.js';
import { createPromoCode, listPromoCodes, PROMO_FAILURE_LIMIT, redeemPromoCode } from './promo.js';

describe('promo codes', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness({ HANGAR_SIGNUP_CREDITS_CENTS: '100' });
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h.close());

  const redeem = (headers: Record<string, string>, payload: unknown) =>
    h.app.inject({ method: 'POST', url: '/v1/billing/promo-codes/redeem', headers, payload: payload as object });
  const balance = async (actor: Actor) =>
    json(await h.app.inject({ method: 'GET', url: '/v1/billing/credits', headers: actor.headers })).data.balanceMicros as number;
  const history = async (actor: Actor) =>
    json(await h.app.inject({ method: 'GET', url: '/v1/billing/credits/history', headers: actor.headers })).data as {
      kind: string;
      amountCents: number;
      description: string;
    }[];
  const promoById = async (id: string) => (await listPromoCodes(h.deps)).find((p) => p.id === id)!;

  it('redeems a code once: the balance goes up by exactly its credits, the history shows a promo entry, and the activity records it', async () => {
    const promo = await createPromoCode(h.deps, { creditsCents: 2_500, maxRedemptions: 10 });
    expect(promo.code).toMatch(/^[A-HJKMNP-Z2-9]{12}$/);
    const before = await balance(admin);

    const res = await redeem(admin.headers, { code: promo.code });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).data).toEqual({ code: promo.code, creditsCents: 2_500, balanceCents: Math.floor((before + 25_000_000) / 10_000) });
    expect(await balance(admin)).toBe(before + 25_000_000);
    const entries = await history(admin);
    expect(entries[0]).toMatchObject({ kind: 'promo', amountCents: 2_500, description: `Promo code ${promo.code}` });
    expect((await promoById(promo.id)).redemptions).toBe(1);
    await expectActivity(h, admin, {
      eventType: 'billing.promo.redeemed',
      resourceType: 'billing',
      resourceId: admin.orgId,
      metadata: { promoId: promo.id, code: promo.code, creditsCents: 2_500 },
    });

    // A second redemption by the same organization is refused and changes nothing.
    const again = await redeem(admin.headers, { code: promo.code });
    expect(again.statusCode).toBe(409);
    expect(json(again).error).toMatchObject({ code: 'conflict', message: expect.stringContaining('already redeemed') });
    expect(await balance(admin)).toBe(before + 25_000_000);
    expect((await history(admin)).filter((e) => e.kind === 'promo')).toHaveLength(1);
    expect((await promoById(promo.id)).redemptions).toBe(1);

    // Another organization may redeem it too.
    const other = await createOrgAdmin(h);
    const otherBefore = await balance(other);
    const theirs = await redeem(other.headers, { code: promo.code });
    expect(theirs.statusCode, theirs.body).toBe(200);
    expect(await balance(other)).toBe(otherBefore + 25_000_000);
    expect((await promoById(promo.id)).redemptions).toBe(2);
  });

  it('a code for two redemptions redeemed by five organizations at once is redeemed exactly twice', async () => {
    const promo = await createPromoCode(h.deps, { creditsCents: 300, maxRedemptions: 2 });
    const orgs = await Promise.all([1, 2, 3, 4, 5].map(() => createOrgAdmin(h)));
    const before = await Promise.all(orgs.map(balance));
    const answers = await Promise.all(orgs.map((o) => redeem(o.headers, { code: promo.code.toLowerCase() })));
    const statuses = answers.map((r) => r.statusCode);
    expect(statuses.filter((s) => s === 200)).toHaveLength(2);
    expect(statuses.filter((s) => s === 409)).toHaveLength(3);
    for (const r of answers.filter((a) => a.statusCode === 409))
      expect(json(r).error).toMatchObject({ code: 'invalid_state', state: 'fully_redeemed' });
    expect((await promoById(promo.id)).redemptions).toBe(2);
    const after = await Promise.all(orgs.map(balance));
    for (const [i, status] of statuses.entries()) expect(after[i]! - before[i]!).toBe(status === 200 ? 3_000_000 : 0);
  });

  it('one organization redeeming a code twice at once is credited once', async () => {
    const promo = await createPromoCode(h.deps, { creditsCents: 400, maxRedemptions: 10 });
    const org = await createOrgAdmin(h);
    const before = await balance(org);
    const answers = await Promise.all([1, 2, 3].map(() => redeem(org.headers, { code: promo.code })));
    expect(answers.map((r) => r.statusCode).sort()).toEqual([200, 409, 409]);
    for (const r of answers.filter((a) => a.statusCode === 409)) expect(json(r).error.code).toBe('conflict');
    expect(await balance(org)).toBe(before + 4_000_000);
    expect((await promoById(promo.id)).redemptions).toBe(1);
  });

  it('codes are case-insensitive: a code given in mixed case is stored upper-case and redeemed in any case', async () => {
    const promo = await createPromoCode(h.deps, { code: 'Spring-Launch-27', creditsCents: 50, maxRedemptions: 5 });
    expect(promo.code).toBe('SPRING-LAUNCH-27');
    const org = await createOrgAdmin(h);
    const res = await redeem(org.headers, { code: '  spring-launch-27 ' });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).data.code).toBe('SPRING-LAUNCH-27');
  });

  it('an expired code is refused and nothing is credited; an unknown code is a plain 404', async () => {
    const promo = await createPromoCode(h.deps, { creditsCents: 50, maxRedemptions: 5, expiresAt: new Date(Date.now() + 60_000).toISOString() });
    await h.deps.db.kysely
      .updateTable('promo_codes')
      .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
      .where('id', '=', promo.id)
      .execute();
    const org = await createOrgAdmin(h);
    const before = await balance(org);
    const res = await redeem(org.headers, { code: promo.code });
    expect(res.statusCode).toBe(409);
    expect(json(res).error).toMatchObject({ code: 'invalid_state', state: 'expired', message: expect.stringContaining('expired') });
    expect(await balance(org)).toBe(before);
    expect((await promoById(promo.id)).redemptions).toBe(0);

    const unknown = await redeem(org.headers, { code: 'NO-SUCH-CODE' });
    expect(unknown.statusCode).toBe(404);
    expect(json(unknown).error).toEqual({ code: 'not_found', message: 'promo code was not found', requestId: expect.any(String) });
  });

  it('members, and admin keys without billing:write, may not redeem; the verb checks the scope itself', async () => {
    const promo = await createPromoCode(h.deps, { creditsCents: 50, maxRedemptions: 5 });
    const org = await createOrgAdmin(h);
    const member = await addOrgMember(h, org, 'member');
    for (const headers of [member.headers, { authorization: `Bearer ${member.token}` }]) {
      const res = await redeem(headers, { code: promo.code });
      expect(res.statusCode).toBe(403);
      expect(json(res).error.code).toBe('forbidden');
    }
    const key = await keyFor(h, org, ['billing:read', 'org:read']);
    const denied = await redeem({ 'x-api-key': key }, { code: promo.code });
    expect(denied.statusCode).toBe(403);
    expect(json(denied).error.message).toContain('billing:write');

    const ctx = systemCtx(h.deps, {
      userId: org.userId,
      orgId: org.orgId,
      role: 'admin',
      scopes: new Set([...ROLE_SCOPES.admin].filter((s) => s !== 'billing:write')),
      apiKeyId: null,
    });
    const err = await redeemPromoCode(ctx, { code: promo.code }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).message).toContain('billing:write');
    expect((await promoById(promo.id)).redemptions).toBe(0);
    // The control: the admin redeems it.
    expect((await redeem(org.headers, { code: promo.code })).statusCode).toBe(200);
  });

  it('validates the body', async () => {
    for (const body of [{}, { code: '' }, { code: 'x'.repeat(101) }, { code: 42 }]) {
      const res = await redeem(admin.headers, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(json(res).error.code).toBe('invalid_request');
    }
  });

  it(`after ${PROMO_FAILURE_LIMIT} refused attempts in a minute an organization is answered 429, even for a good code; others are not`, async () => {
    const good = await createPromoCode(h.deps, { creditsCents: 50, maxRedemptions: 5 });
    const org = await createOrgAdmin(h);
    for (let i = 0; i < PROMO_FAILURE_LIMIT; i++) expect((await redeem(org.headers, { code: `GUESS-${i}` })).statusCode).toBe(404);
    const before = await balance(org);
    for (const code of ['GUESS-X', good.code]) {
      const res = await redeem(org.headers, { code });
      expect(res.statusCode).toBe(429);
      expect(json(res).error.code).toBe('rate_limited');
      const retry = Number(res.headers['retry-after']);
      expect(retry).toBeGreaterThanOrEqual(1);
      expect(retry).toBeLessThanOrEqual(60);
    }
    expect(await balance(org)).toBe(before);
    expect((await promoById(good.id)).redemptions).toBe(0);
    // Another organization is not held back.
    const other = await createOrgAdmin(h);
    expect((await redeem(other.headers, { code: good.code })).statusCode).toBe(200);
  });

  describe('creating codes (the operator’s verb)', () => {
    it('refuses bad terms naming the field', async () => {
      const cases: [Parameters<typeof createPromoCode>[1], string][] = [
        [{ code: 'ab', creditsCents: 1, maxRedemptions: 1 }, 'code'],
        [{ code: 'no spaces', creditsCents: 1, maxRedemptions: 1 }, 'code'],
        [{ code: 'X'.repeat(65), creditsCents: 1, maxRedemptions: 1 }, 'code'],
        [{ creditsCents: 0, maxRedemptions: 1 }, 'creditsCents'],
        [{ creditsCents: 1.5, maxRedemptions: 1 }, 'creditsCents'],
        [{ creditsCents: 100_000_001, maxRedemptions: 1 }, 'creditsCents'],
        [{ creditsCents: 1, maxRedemptions: 0 }, 'maxRedemptions'],
        [{ creditsCents: 1, maxRedemptions: 10_000_001 }, 'maxRedemptions'],
        [{ creditsCents: 1, maxRedemptions: 1, expiresAt: '2020-01-01' }, 'expiresAt'],
        [{ creditsCents: 1, maxRedemptions: 1, expiresAt: '2099-02-30' }, 'expiresAt'],
        [{ creditsCents: 1, maxRedemptions: 1, expiresAt: 'tomorrow' }, 'expiresAt'],
        [{ creditsCents: 1, maxRedemptions: 1, expiresAt: '2099-01-01T00:00:00' }, 'expiresAt'],
      ];
      for (const [input, field] of cases) {
        const err = await createPromoCode(h.deps, input).catch((e: unknown) => e);
        expect(err, JSON.stringify(input)).toBeInstanceOf(AppError);
        expect((err as AppError).code).toBe('invalid_request');
        expect((err as AppError).details?.issues?.[0]?.path).toBe(field);
      }
    });

    it('a date alone expires at the end of that day, UTC; a code given twice is a conflict', async () => {
      const promo = await createPromoCode(h.deps, { code: 'YEAR-END-2099', creditsCents: 10, maxRedemptions: 1, expiresAt: '2099-12-31' });
      expect(promo.expiresAt).toBe('2100-01-01T00:00:00.000Z');
      const dup = await createPromoCode(h.deps, { code: 'year-end-2099', creditsCents: 10, maxRedemptions: 1 }).catch((e: unknown) => e);
      expect((dup as AppError).code).toBe('conflict');
      const listed = await listPromoCodes(h.deps);
      expect(listed.filter((p) => p.code === 'YEAR-END-2099')).toHaveLength(1);
    });
  });
});

securitySuite('billing promo codes', [
  { method: 'POST', url: () => '/v1/billing/promo-codes/redeem', scope: 'billing:write', body: { code: 'NOPE-1234' } },
]);
