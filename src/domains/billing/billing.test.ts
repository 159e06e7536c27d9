import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { securitySuite } from '../../../test/security.js';
import { createUser, issueSessionToken } from '../identity/index.js';

describe('billing credits', () => {
  let h: Harness;
  let admin: Actor;
  let member: Actor;
  beforeAll(async () => {
    h = await createHarness({ HANGAR_SIGNUP_CREDITS_CENTS: '750' });
    admin = await createOrgAdmin(h);
    member = await addOrgMember(h, admin, 'member');
  });
  afterAll(() => h.close());

  const get = (headers: Record<string, string>, url: string) => h.app.inject({ method: 'GET', url, headers });

  it('an admin sees the balance, starting with the sign-up credits', async () => {
    const res = await get(admin.headers, '/v1/billing/credits');
    expect(res.statusCode).toBe(200);
    expect(json(res).data).toEqual({ balanceCents: 750, balanceMicros: 7_500_000, currency: 'usd', updatedAt: expect.any(String) });
    expect(json(res).meta.requestId).toBe(res.headers['x-request-id']);
  });

  it('the history holds the sign-up grant', async () => {
    const res = await get(admin.headers, '/v1/billing/credits/history');
    expect(res.statusCode).toBe(200);
    const body = json(res);
    expect(body.data).toEqual([
      {
        id: expect.any(String),
        kind: 'signup_grant',
        amountCents: 750,
        amountMicros: 7_500_000,
        description: 'Sign-up credits',
        createdAt: expect.any(String),
      },
    ]);
    expect(body.meta).toMatchObject({ hasMore: false, nextCursor: null });
    const balance = json(await get(admin.headers, '/v1/billing/credits')).data;
    expect(balance.updatedAt).toBe(body.data[0].createdAt);
  });

  it('works with a session token too', async () => {
    const res = await get({ authorization: `Bearer ${admin.token}` }, '/v1/billing/credits');
    expect(res.statusCode).toBe(200);
    expect(json(res).data.balanceCents).toBe(750);
  });

  it('members may not read billing, by key or by session', async () => {
    for (const url of ['/v1/billing/credits', '/v1/billing/credits/history']) {
      for (const headers of [member.headers, { authorization: `Bearer ${member.token}` }]) {
        const res = await get(headers, url);
        expect(res.statusCode, url).toBe(403);
        expect(json(res).error.code).toBe('forbidden');
        expect(json(res).data).toBeUndefined();
      }
    }
  });

  it('an admin key without billing:read is refused', async () => {
    const key = await keyFor(h, admin, ['org:read', 'activity:read']);
    const res = await get({ 'x-api-key': key }, '/v1/billing/credits/history');
    expect(res.statusCode).toBe(403);
    expect(json(res).error.message).toContain('billing:read');
  });

  it('sign-up credits are per user: a user’s second organization starts at zero', async () => {
    const user = await createUser(h.deps, { email: 'twice@example.test' });
    const auth = { authorization: `Bearer ${await issueSessionToken(h.deps.config, user.id)}` };
    const first = json(await h.app.inject({ method: 'POST', url: '/v1/organizations', headers: auth, payload: { name: 'First' } })).data;
    const second = json(await h.app.inject({ method: 'POST', url: '/v1/organizations', headers: auth, payload: { name: 'Second' } })).data;

    const firstHistory = json(await get({ ...auth, 'x-org-id': first.id }, '/v1/billing/credits/history')).data;
    expect(firstHistory.map((e: { kind: string }) => e.kind)).toEqual(['signup_grant']);
    const secondHistory = json(await get({ ...auth, 'x-org-id': second.id }, '/v1/billing/credits/history'));
    expect(secondHistory.data).toEqual([]);
    expect(secondHistory.meta).toMatchObject({ hasMore: false, nextCursor: null });
    expect(json(await get({ ...auth, 'x-org-id': second.id }, '/v1/billing/credits')).data).toEqual({
      balanceCents: 0,
      balanceMicros: 0,
      currency: 'usd',
      updatedAt: null,
    });
  });

  it('one organization’s credits are not another’s', async () => {
    const other = await createOrgAdmin(h);
    const history = json(await get(other.headers, '/v1/billing/credits/history')).data;
    const mine = json(await get(admin.headers, '/v1/billing/credits/history')).data;
    expect(history).toHaveLength(1);
    expect(history[0].id).not.toBe(mine[0].id);
  });

  it('validates history paging', async () => {
    for (const q of ['?limit=0', '?limit=201', '?cursor=bogus']) {
      const res = await get(admin.headers, `/v1/billing/credits/history${q}`);
      expect(res.statusCode, q).toBe(400);
      expect(json(res).error.code).toBe('invalid_request');
    }
    expect((await get(admin.headers, '/v1/billing/credits/history?limit=200')).statusCode).toBe(200);
  });
});

securitySuite('billing', [
  { method: 'GET', url: () => '/v1/billing/credits', scope: 'billing:read' },
  { method: 'GET', url: () => '/v1/billing/credits/history', scope: 'billing:read' },
]);
