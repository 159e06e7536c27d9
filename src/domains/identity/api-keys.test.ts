import { randomBytes } from 'node:crypto';
import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { expectActivity } from '../../../test/activity.js';
import { securitySuite } from '../../../test/security.js';
import { markRevocation } from '../../platform/revocations.js';
import { ROLE_SCOPES } from '../../platform/scopes.js';
import { createUser, issueSessionToken } from './index.js';
import { KEY_CACHE_TTL_MS } from './key-cache.js';

describe('API keys and authentication', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness();
  });
  afterAll(() => h.close());

  const createKey = (headers: Record<string, string>, body: unknown) =>
    h.app.inject({ method: 'POST', url: '/v1/api-keys', headers, payload: body as object });
  const me = (headers: Record<string, string>) => h.app.inject({ method: 'GET', url: '/v1/me', headers });
  const listKeys = async (headers: Record<string, string>, query = '') => {
    const res = await h.app.inject({ method: 'GET', url: `/v1/api-keys${query}`, headers });
    expect(res.statusCode).toBe(200);
    return json(res);
  };

  describe('creating a key', () => {
    let admin: Actor;
    beforeAll(async () => {
      admin = await createOrgAdmin(h);
    });

    it('returns a live secret once, and the key works at once', async () => {
      const res = await createKey(admin.headers, { name: ' ci deploy ', scopes: ['activity:read', 'api_keys:read'] });
      expect(res.statusCode).toBe(201);
      const body = json(res);
      expect(body.meta.requestId).toBe(res.headers['x-request-id']);
      const key = body.data;
      expect(key.key).toMatch(/^hgr_live_[0-9A-Za-z]{40}$/);
      expect(key).toMatchObject({
        name: 'ci deploy',
        environment: 'live',
        scopes: ['activity:read', 'api_keys:read'],
        userId: admin.userId,
        lastUsedAt: null,
        expiresAt: null,
        revokedAt: null,
      });
      expect(key.key.startsWith(key.prefix)).toBe(true);
      expect(key.prefix.length).toBeLessThan(key.key.length - 20);

      const who = json(await me({ 'x-api-key': key.key })).data;
      expect(who.authType).toBe('api_key');
      expect(who.user.id).toBe(admin.userId);
      expect(who.currentOrganizationId).toBe(admin.orgId);
      expect(who.scopes).toEqual(['activity:read', 'api_keys:read']);
    });

    it('makes test keys with the test prefix', async () => {
      const res = await createKey(admin.headers, { name: 'sandbox', scopes: ['org:read'], environment: 'test' });
      expect(res.statusCode).toBe(201);
      expect(json(res).data.key).toMatch(/^hgr_test_[0-9A-Za-z]{40}$/);
      expect(json(res).data.environment).toBe('test');
      expect((await me({ 'x-api-key': json(res).data.key })).statusCode).toBe(200);
    });

    it('never shows the secret again, in lists or by id', async () => {
      const created = json(await createKey(admin.headers, { name: 'secret once', scopes: ['org:read'] })).data;
      const list = await listKeys(admin.headers, '?limit=200');
      const listed = list.data.find((k: { id: string }) => k.id === created.id);
      expect(listed).toBeDefined();
      expect(listed).not.toHaveProperty('key');
      expect(JSON.stringify(list)).not.toContain(created.key);

      const one = await h.app.inject({ method: 'GET', url: `/v1/api-keys/${created.id}`, headers: admin.headers });
      expect(one.statusCode).toBe(200);
      expect(json(one).data).not.toHaveProperty('key');
      expect(one.body).not.toContain(created.key);
      const { key: _secret, ...rest } = created;
      expect(json(one).data).toEqual(rest);
    });

    it('stores only a hash of the secret', async () => {
      const created = json(await createKey(admin.headers, { name: 'hashed', scopes: ['org:read'] })).data;
      const row = await h.deps.db.kysely.selectFrom('api_keys').selectAll().where('id', '=', created.id).executeTakeFirstOrThrow();
      const secretPart = created.key.slice('hgr_live_'.length);
      for (const value of Object.values(row)) {
        if (typeof value !== 'string') continue;
        expect(value).not.toContain(created.key);
        expect(value).not.toContain(secretPart);
        expect(value).not.toContain(secretPart.slice(-20));
      }
      expect(row.hash).toMatch(/^[0-9a-f]{64}$/);
    });

    it('accepts a future expiry, and refuses a past one', async () => {
      const future = new Date(Date.now() + 3600_000).toISOString();
      const ok = await createKey(admin.headers, { name: 'expiring', scopes: ['org:read'], expiresAt: future });
      expect(ok.statusCode).toBe(201);
      expect(json(ok).data.expiresAt).toBe(future);

      const past = await createKey(admin.headers, { name: 'expired', scopes: ['org:read'], expiresAt: '2001-01-01T00:00:00Z' });
      expect(past.statusCode).toBe(400);
      expect(json(past).error.code).toBe('invalid_request');
      expect(json(past).error.message).toContain('expiresAt');
    });

    it('refuses an expired key', async () => {
      const created = json(await createKey(admin.headers, { name: 'to expire', scopes: ['org:read'] })).data;
      expect((await me({ 'x-api-key': created.key })).statusCode).toBe(200);
      // Expiry is a point in time; move it into the past rather than waiting for it.
      await h.deps.db.kysely
        .updateTable('api_keys')
        .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
        .where('id', '=', created.id)
        .execute();
      // Nothing in the product moves an expiry (it is fixed at creation), so nothing marks it for the key cache:
      // as a stored key expires only when its time comes, this one is read again once its cache entry is stale.
      vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + KEY_CACHE_TTL_MS });
      try {
        const res = await me({ 'x-api-key': created.key });
        expect(res.statusCode).toBe(401);
        expect(json(res).error.code).toBe('unauthenticated');
      } finally {
        vi.useRealTimers();
      }
    });

    it('refuses a key the moment it expires, even one just used', async () => {
      const expiresAt = new Date(Date.now() + 60_000).toISOString();
      const created = json(await createKey(admin.headers, { name: 'expiring soon', scopes: ['org:read'], expiresAt })).data;
      vi.useFakeTimers({ toFake: ['Date'], now: Date.parse(expiresAt) - 1 });
      try {
        expect((await me({ 'x-api-key': created.key })).statusCode).toBe(200);
        vi.setSystemTime(Date.parse(expiresAt));
        const res = await me({ 'x-api-key': created.key });
        expect(res.statusCode).toBe(401);
        expect(json(res).error.code).toBe('unauthenticated');
      } finally {
        vi.useRealTimers();
      }
    });

    it('rejects unknown scopes and malformed bodies with 400', async () => {
      for (const body of [
        { name: 'x', scopes: ['sandbox:launch'] },
        { name: 'x', scopes: ['org:read', 'nope:*'] },
        { name: 'x', scopes: ['ORG:READ'] },
        { name: 'x', scopes: [] },
        { name: 'x' },
        { name: '   ', scopes: ['org:read'] },
        { scopes: ['org:read'] },
        { name: 'x', scopes: ['org:read'], environment: 'prod' },
        { name: 'x', scopes: ['org:read'], expiresAt: 'tomorrow' },
      ]) {
        const res = await createKey(admin.headers, body);
        expect(res.statusCode, JSON.stringify(body)).toBe(400);
        expect(json(res).error.code).toBe('invalid_request');
      }
      const res = await createKey(admin.headers, { name: 'x', scopes: ['sandbox:launch'] });
      expect(json(res).error.issues).toEqual([{ path: 'scopes', message: expect.stringContaining('sandbox:launch') }]);
    });

    it('records who created and revoked a key in the activity log', async () => {
      const created = json(await createKey(admin.headers, { name: 'audited', scopes: ['org:read'] })).data;
      await h.app.inject({ method: 'DELETE', url: `/v1/api-keys/${created.id}`, headers: admin.headers });
      const res = await h.app.inject({
        method: 'GET',
        url: `/v1/activity?resource_type=api_key&resource_id=${created.id}`,
        headers: admin.headers,
      });
      const events = json(res).data.events;
      expect(events.map((e: { eventType: string }) => e.eventType)).toEqual(['api_key.revoked', 'api_key.created']);
      expect(events.every((e: { actorUserId: string }) => e.actorUserId === admin.userId)).toBe(true);
      expect(JSON.stringify(events)).not.toContain(created.key);
      await expectActivity(h, admin, { eventType: 'api_key.created', resourceType: 'api_key', resourceId: created.id });
      await expectActivity(h, admin, { eventType: 'api_key.revoked', resourceType: 'api_key', resourceId: created.id });
    });
  });

  describe('scopes never grow', () => {
    let admin: Actor;
    let member: Actor;
    beforeAll(async () => {
      admin = await createOrgAdmin(h);
      member = await addOrgMember(h, admin, 'member');
    });

    it('a member cannot create a key with an admin scope', async () => {
      for (const scopes of [['org:admin'], ['org:read', 'billing:read'], ['credentials:admin']]) {
        const res = await createKey(member.headers, { name: 'escalate', scopes });
        expect(res.statusCode, scopes.join()).toBe(403);
        expect(json(res).error.code).toBe('forbidden');
        expect(json(res).error.message).toContain(scopes[scopes.length - 1]);
      }
      const keys = await listKeys(member.headers);
      expect(keys.data.some((k: { name: string }) => k.name === 'escalate')).toBe(false);
    });

    it('a wildcard grants only what the caller holds', async () => {
      const res = await createKey(member.headers, { name: 'everything I have', scopes: ['*'] });
      expect(res.statusCode).toBe(201);
      const scopes: string[] = json(res).data.scopes;
      expect(new Set(scopes)).toEqual(ROLE_SCOPES.member);
      expect(scopes).not.toContain('org:admin');
      const billing = await h.app.inject({ method: 'GET', url: '/v1/billing/credits', headers: { 'x-api-key': json(res).data.key } });
      expect(billing.statusCode).toBe(403);

      // An admin holds everything `*` matches, so the key keeps `*` and will cover scopes added later.
      const admins = await createKey(admin.headers, { name: 'admin everything', scopes: ['*'] });
      expect(json(admins).data.scopes).toEqual(['*']);
      const me = json(await h.app.inject({ method: 'GET', url: '/v1/me', headers: { 'x-api-key': json(admins).data.key } }));
      expect(new Set(me.data.scopes)).toEqual(new Set([...ROLE_SCOPES.admin]));
    });

    it('a narrow key cannot mint a wider one', async () => {
      const narrow = await keyFor(h, admin, ['api_keys:read', 'api_keys:write']);
      const res = await createKey({ 'x-api-key': narrow }, { name: 'wider', scopes: ['*'] });
      expect(res.statusCode).toBe(201);
      const minted = json(res).data;
      expect(minted.scopes).toEqual(['api_keys:read', 'api_keys:write']);
      const activity = await h.app.inject({ method: 'GET', url: '/v1/activity', headers: { 'x-api-key': minted.key } });
      expect(activity.statusCode).toBe(403);
      expect(json(activity).error.message).toContain('activity:read');

      const named = await createKey({ 'x-api-key': narrow }, { name: 'named', scopes: ['activity:read'] });
      expect(named.statusCode).toBe(403);
      const nothing = await createKey({ 'x-api-key': narrow }, { name: 'none', scopes: ['agent:*'] });
      expect(nothing.statusCode).toBe(403);
      expect(json(nothing).error.message).toContain('agent:*');
    });

    it('a prefix wildcard expands to the matching scopes', async () => {
      const res = await createKey(admin.headers, { name: 'storage', scopes: ['storage:*'] });
      expect(res.statusCode).toBe(201);
      expect(json(res).data.scopes).toEqual(['storage:*']);
      const me = json(await h.app.inject({ method: 'GET', url: '/v1/me', headers: { 'x-api-key': json(res).data.key } }));
      expect(me.data.scopes).toEqual(['storage:read', 'storage:write']);
    });

    it('a key loses what its owner loses', async () => {
      const demoted = await addOrgMember(h, admin, 'admin');
      const key = await keyFor(h, demoted, ['billing:read']);
      expect((await h.app.inject({ method: 'GET', url: '/v1/billing/credits', headers: { 'x-api-key': key } })).statusCode).toBe(200);
      // Changed in the table directly, with the revocation mark changed as changeMemberRole and removeMember change it
      // (a cached key is read again for it): the key is not revoked, so what refuses it is its owner's membership.
      await h.deps.db.kysely
        .updateTable('memberships')
        .set({ role: 'member' })
        .where('user_id', '=', demoted.userId)
        .where('org_id', '=', demoted.orgId)
        .execute();
      await markRevocation(h.deps.db.kysely);
      expect((await h.app.inject({ method: 'GET', url: '/v1/billing/credits', headers: { 'x-api-key': key } })).statusCode).toBe(403);

      await h.deps.db.kysely.deleteFrom('memberships').where('user_id', '=', demoted.userId).where('org_id', '=', demoted.orgId).execute();
      await markRevocation(h.deps.db.kysely);
      const gone = await me({ 'x-api-key': key });
      expect(gone.statusCode).toBe(401);
      expect(json(gone).error.code).toBe('unauthenticated');
    });
  });

  describe('revoking, listing and last use', () => {
    let admin: Actor;
    let alice: Actor;
    let bob: Actor;
    beforeAll(async () => {
      admin = await createOrgAdmin(h);
      alice = await addOrgMember(h, admin, 'member');
      bob = await addOrgMember(h, admin, 'member');
    });

    it('a revoked key stops working at once, and revoking again changes nothing', async () => {
      const created = json(await createKey(alice.headers, { name: 'short-lived', scopes: ['org:read'] })).data;
      expect((await me({ 'x-api-key': created.key })).statusCode).toBe(200);

      const revoked = await h.app.inject({ method: 'DELETE', url: `/v1/api-keys/${created.id}`, headers: alice.headers });
      expect(revoked.statusCode).toBe(200);
      const revokedAt = json(revoked).data.revokedAt;
      expect(revokedAt).toEqual(expect.any(String));

      for (const headers of [{ 'x-api-key': created.key }, { authorization: `Bearer ${created.key}` }] as Record<string, string>[]) {
        const res = await me(headers);
        expect(res.statusCode).toBe(401);
        expect(json(res).error.code).toBe('unauthenticated');
      }

      const again = await h.app.inject({ method: 'DELETE', url: `/v1/api-keys/${created.id}`, headers: alice.headers });
      expect(again.statusCode).toBe(200);
      expect(json(again).data.revokedAt).toBe(revokedAt);

      expect((await listKeys(alice.headers)).data.map((k: { id: string }) => k.id)).not.toContain(created.id);
      const withRevoked = await listKeys(alice.headers, '?include_revoked=true');
      expect(withRevoked.data.find((k: { id: string }) => k.id === created.id).revokedAt).toBe(revokedAt);
    });

    it('a key in use (so cached) is refused by the first request after its revocation, whatever was in flight', async () => {
      const created = json(await createKey(alice.headers, { name: 'busy', scopes: ['org:read'] })).data;
      for (let i = 0; i < 3; i++) expect((await me({ 'x-api-key': created.key })).statusCode).toBe(200);
      const inFlight = Array.from({ length: 20 }, () => me({ 'x-api-key': created.key }));
      const revoked = await h.app.inject({ method: 'DELETE', url: `/v1/api-keys/${created.id}`, headers: alice.headers });
      expect(revoked.statusCode).toBe(200);
      expect((await me({ 'x-api-key': created.key })).statusCode).toBe(401);
      // Those sent before the revocation answered one way or the other, and none left the key usable after it.
      for (const res of await Promise.all(inFlight)) expect([200, 401]).toContain(res.statusCode);
      expect((await me({ 'x-api-key': created.key })).statusCode).toBe(401);
    });

    it('a member removed or demoted through the API is refused or narrowed on their key’s next request', async () => {
      const demoted = await addOrgMember(h, admin, 'admin');
      const key = await keyFor(h, demoted, ['billing:read', 'org:read']);
      const credits = () => h.app.inject({ method: 'GET', url: '/v1/billing/credits', headers: { 'x-api-key': key } });
      for (let i = 0; i < 2; i++) expect((await credits()).statusCode).toBe(200);
      const changed = await h.app.inject({
        method: 'PATCH',
        url: `/v1/organizations/${admin.orgId}/members/${demoted.userId}`,
        headers: admin.headers,
        payload: { role: 'member' },
      });
      expect(changed.statusCode).toBe(200);
      expect((await credits()).statusCode).toBe(403);

      expect((await me({ 'x-api-key': key })).statusCode).toBe(200);
      const removed = await h.app.inject({
        method: 'DELETE',
        url: `/v1/organizations/${admin.orgId}/members/${demoted.userId}`,
        headers: admin.headers,
      });
      expect(removed.statusCode).toBe(204);
      expect((await me({ 'x-api-key': key })).statusCode).toBe(401);
    });

    it('sets lastUsedAt once the key is used', async () => {
      const created = json(await createKey(alice.headers, { name: 'used', scopes: ['org:read'] })).data;
      const before = json(await h.app.inject({ method: 'GET', url: `/v1/api-keys/${created.id}`, headers: alice.headers })).data;
      expect(before.lastUsedAt).toBeNull();

      expect((await me({ authorization: `Bearer ${created.key}` })).statusCode).toBe(200);
      const after = json(await h.app.inject({ method: 'GET', url: `/v1/api-keys/${created.id}`, headers: alice.headers })).data;
      expect(after.lastUsedAt).toEqual(expect.any(String));
      expect(Date.parse(after.lastUsedAt)).toBeGreaterThanOrEqual(Date.parse(created.createdAt));
    });

    it('members see and revoke only their own keys; admins see and revoke all', async () => {
      const alices = json(await createKey(alice.headers, { name: 'alice key', scopes: ['org:read'] })).data;
      const bobs = json(await createKey(bob.headers, { name: 'bob key', scopes: ['org:read'] })).data;

      const seenByBob = (await listKeys(bob.headers, '?limit=200')).data;
      expect(seenByBob.every((k: { userId: string }) => k.userId === bob.userId)).toBe(true);
      expect(seenByBob.map((k: { id: string }) => k.id)).toContain(bobs.id);

      const peek = await h.app.inject({ method: 'GET', url: `/v1/api-keys/${alices.id}`, headers: bob.headers });
      expect(peek.statusCode).toBe(404);
      expect(json(peek).error.code).toBe('not_found');
      const steal = await h.app.inject({ method: 'DELETE', url: `/v1/api-keys/${alices.id}`, headers: bob.headers });
      expect(steal.statusCode).toBe(404);
      expect((await me({ 'x-api-key': alices.key })).statusCode).toBe(200);

      const seenByAdmin = (await listKeys(admin.headers, '?limit=200')).data.map((k: { id: string }) => k.id);
      expect(seenByAdmin).toEqual(expect.arrayContaining([alices.id, bobs.id]));
      expect((await h.app.inject({ method: 'GET', url: `/v1/api-keys/${bobs.id}`, headers: admin.headers })).statusCode).toBe(200);
      const byAdmin = await h.app.inject({ method: 'DELETE', url: `/v1/api-keys/${bobs.id}`, headers: admin.headers });
      expect(byAdmin.statusCode).toBe(200);
      expect((await me({ 'x-api-key': bobs.key })).statusCode).toBe(401);
    });

    it('pages through keys newest first, with no duplicates or gaps', async () => {
      const owner = await createOrgAdmin(h);
      const made: string[] = [];
      for (let i = 0; i < 5; i++) made.push(json(await createKey(owner.headers, { name: `k${i}`, scopes: ['org:read'] })).data.id);
      const all = (await listKeys(owner.headers, '?limit=200')).data.map((k: { id: string }) => k.id);
      expect(all).toHaveLength(6); // the harness key too
      expect(all).toEqual(expect.arrayContaining(made));

      const seen: string[] = [];
      let cursor: string | null = null;
      do {
        const page: any = await listKeys(owner.headers, `?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
        expect(page.data.length).toBeLessThanOrEqual(2);
        seen.push(...page.data.map((k: { id: string }) => k.id));
        cursor = page.meta.nextCursor;
        expect(page.meta.hasMore).toBe(cursor !== null);
      } while (cursor);
      expect(seen).toEqual(all);

      for (const q of ['?limit=0', '?limit=201', '?cursor=not-a-cursor']) {
        const res = await h.app.inject({ method: 'GET', url: `/v1/api-keys${q}`, headers: owner.headers });
        expect(res.statusCode, q).toBe(400);
      }
    });

    it('an unknown key id is 404', async () => {
      const res = await h.app.inject({ method: 'GET', url: '/v1/api-keys/00000000-0000-4000-8000-000000000000', headers: admin.headers });
      expect(res.statusCode).toBe(404);
      expect(json(res).error.code).toBe('not_found');
    });
  });

  describe('credentials', () => {
    let admin: Actor;
    beforeAll(async () => {
      admin = await createOrgAdmin(h);
    });

    it('accepts an API key as X-API-Key or as Authorization: Bearer', async () => {
      const variants: Record<string, string>[] = [
        { 'x-api-key': admin.key },
        { authorization: `Bearer ${admin.key}` },
        { authorization: `bearer ${admin.key}` },
      ];
      for (const headers of variants) {
        const res = await me(headers);
        expect(res.statusCode).toBe(200);
        expect(json(res).data.authType).toBe('api_key');
      }
    });

    it('rejects missing, malformed and unknown credentials with 401', async () => {
      const cases: Record<string, string>[] = [
        {},
        { 'x-api-key': '' },
        { authorization: 'Basic dXNlcjpwYXNz' },
        { 'x-api-key': 'hgr_live_short' },
        { 'x-api-key': `hgr_live_${'A'.repeat(40)}` },
        { authorization: `Bearer hgr_test_${'b'.repeat(40)}` },
        { authorization: 'Bearer garbage' },
        { authorization: 'Bearer a.b.c' },
      ];
      for (const headers of cases) {
        const res = await me(headers);
        expect(res.statusCode, JSON.stringify(headers)).toBe(401);
        expect(json(res).error.code).toBe('unauthenticated');
      }
    });

    it('accepts session tokens from the built-in issuer', async () => {
      const res = await me({ authorization: `Bearer ${admin.token}` });
      expect(res.statusCode).toBe(200);
      const who = json(res).data;
      expect(who).toMatchObject({ authType: 'session', currentOrganizationId: admin.orgId });
      expect(who.user.id).toBe(admin.userId);
      expect(who.scopes).toContain('org:admin');
    });

    it('rejects expired, forged and orphaned session tokens with 401', async () => {
      const expired = await issueSessionToken(h.deps.config, admin.userId, -60);
      const forged = await new SignJWT({})
        .setProtectedHeader({ alg: 'HS256' })
        .setIssuer('hangar')
        .setAudience('hangar')
        .setSubject(admin.userId)
        .setExpirationTime('1h')
        .sign(randomBytes(32));
      const [header, payload] = admin.token.split('.');
      const unsigned = `${header}.${payload}.`;
      const otherIssuer = await new SignJWT({})
        .setProtectedHeader({ alg: 'HS256' })
        .setIssuer('https://idp.example.test')
        .setAudience('hangar')
        .setSubject(admin.userId)
        .setExpirationTime('1h')
        .sign(randomBytes(32));
      const unknownUser = await issueSessionToken(h.deps.config, '00000000-0000-4000-8000-000000000000');
      for (const token of [expired, forged, unsigned, otherIssuer, unknownUser]) {
        const res = await me({ authorization: `Bearer ${token}` });
        expect(res.statusCode).toBe(401);
        expect(json(res).error.code).toBe('unauthenticated');
      }
    });

    it('a session with no organization may read its profile but nothing of an organization', async () => {
      const user = await createUser(h.deps, { email: 'lonely@example.test' });
      const auth = { authorization: `Bearer ${await issueSessionToken(h.deps.config, user.id)}` };
      expect((await me(auth)).statusCode).toBe(200);
      const keys = await h.app.inject({ method: 'GET', url: '/v1/api-keys', headers: auth });
      expect(keys.statusCode).toBe(403);
      expect(json(keys).error.code).toBe('forbidden');
    });

    it('X-Org-Id selects the organization of a session; a non-member organization is 404', async () => {
      const auth = { authorization: `Bearer ${admin.token}` };
      const second = json(await h.app.inject({ method: 'POST', url: '/v1/organizations', headers: auth, payload: { name: 'Second' } })).data;
      const stranger = await createOrgAdmin(h);

      expect(json(await me(auth)).data.currentOrganizationId).toBe(admin.orgId);
      const inSecond = json(await me({ ...auth, 'x-org-id': second.id })).data;
      expect(inSecond.currentOrganizationId).toBe(second.id);
      expect(inSecond.defaultProjectId).toBe(second.defaultProjectId);

      // A key made in the second organization belongs to it.
      const made = json(await createKey({ ...auth, 'x-org-id': second.id }, { name: 'second org key', scopes: ['org:read'] })).data;
      expect(json(await me({ 'x-api-key': made.key })).data.currentOrganizationId).toBe(second.id);

      for (const org of [stranger.orgId, '00000000-0000-4000-8000-000000000000', 'not-an-org']) {
        const res = await me({ ...auth, 'x-org-id': org });
        expect(res.statusCode).toBe(404);
        expect(json(res).error.code).toBe('not_found');
      }
    });

    it('an API key with X-Org-Id of another organization is 403, even one its owner belongs to', async () => {
      const auth = { authorization: `Bearer ${admin.token}` };
      const other = json(await h.app.inject({ method: 'POST', url: '/v1/organizations', headers: auth, payload: { name: 'Other' } })).data;
      const stranger = await createOrgAdmin(h);

      expect((await me({ ...admin.headers, 'x-org-id': admin.orgId })).statusCode).toBe(200);
      for (const org of [other.id, stranger.orgId]) {
        const res = await me({ ...admin.headers, 'x-org-id': org });
        expect(res.statusCode).toBe(403);
        expect(json(res).error.code).toBe('forbidden');
      }
    });
  });
});

const keyIdOf = async (owner: Actor, h: Harness) => {
  const res = await h.app.inject({
    method: 'POST',
    url: '/v1/api-keys',
    headers: owner.headers,
    payload: { name: 'security target', scopes: ['org:read'] },
  });
  return json(res).data.id as string;
};

securitySuite('api keys', [
  { method: 'POST', url: () => '/v1/api-keys', scope: 'api_keys:write', body: { name: 'k', scopes: ['org:read'] } },
  { method: 'GET', url: () => '/v1/api-keys', scope: 'api_keys:read' },
  { method: 'GET', url: async (o, h) => `/v1/api-keys/${await keyIdOf(o, h)}`, scope: 'api_keys:read', crossOrg: true },
  { method: 'DELETE', url: async (o, h) => `/v1/api-keys/${await keyIdOf(o, h)}`, scope: 'api_keys:write', crossOrg: true },
]);
