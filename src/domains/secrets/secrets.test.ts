import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { expectActivity } from '../../../test/activity.js';
import { securitySuite } from '../../../test/security.js';
import { ALL_SCOPES } from '../../platform/scopes.js';
import { resolveSecret } from './index.js';

const secretValue = (label: string) => `sk-${label}-${randomBytes(12).toString('hex')}`;

describe('secrets', () => {
  let h: Harness;
  let admin: Actor;
  let member: Actor;
  let otherMember: Actor;
  let stranger: Actor;

  beforeAll(async () => {
    h = await createHarness();
    admin = await createOrgAdmin(h);
    member = await addOrgMember(h, admin, 'member');
    otherMember = await addOrgMember(h, admin, 'member');
    stranger = await createOrgAdmin(h);
  });
  afterAll(() => h?.close());

  const put = (actor: Pick<Actor, 'headers'>, body: unknown) =>
    h.app.inject({ method: 'POST', url: '/v1/secrets', headers: actor.headers, payload: body as object });
  const del = (actor: Pick<Actor, 'headers'>, name: string, scope?: 'user' | 'organization') =>
    h.app.inject({ method: 'DELETE', url: `/v1/secrets/${encodeURIComponent(name)}${scope ? `?scope=${scope}` : ''}`, headers: actor.headers });
  const list = async (actor: Pick<Actor, 'headers'>) => {
    const res = await h.app.inject({ method: 'GET', url: '/v1/secrets', headers: actor.headers });
    expect(res.statusCode).toBe(200);
    return { res, data: json(res).data as { name: string; scope: string; createdAt: string; updatedAt: string }[] };
  };
  const storedRows = (orgId: string) => h.deps.db.kysely.selectFrom('secrets').selectAll().where('org_id', '=', orgId).execute();

  it('creates (201), replaces (200), lists names only, and deletes (204, then 404)', async () => {
    const first = secretValue('first');
    const created = await put(member, { name: 'DEPLOY_TOKEN', value: first });
    expect(created.statusCode).toBe(201);
    expect(created.body).not.toContain(first);
    const secret = json(created).data;
    expect(secret).toEqual({ name: 'DEPLOY_TOKEN', scope: 'user', createdAt: expect.any(String), updatedAt: expect.any(String) });
    expect(json(created).meta.requestId).toBe(created.headers['x-request-id']);

    const second = secretValue('second');
    const replaced = await put(member, { name: 'DEPLOY_TOKEN', value: second, scope: 'user' });
    expect(replaced.statusCode).toBe(200);
    expect(replaced.body).not.toContain(second);
    expect(json(replaced).data.createdAt).toBe(secret.createdAt);
    expect(Date.parse(json(replaced).data.updatedAt)).toBeGreaterThanOrEqual(Date.parse(secret.updatedAt));
    expect(await resolveSecret(h.deps, member.orgId, member.userId, 'DEPLOY_TOKEN')).toBe(second);

    const { res, data } = await list(member);
    expect(data.filter((s) => s.name === 'DEPLOY_TOKEN')).toEqual([
      { name: 'DEPLOY_TOKEN', scope: 'user', createdAt: secret.createdAt, updatedAt: json(replaced).data.updatedAt },
    ]);
    expect(res.body).not.toContain(first);
    expect(res.body).not.toContain(second);
    for (const s of data) expect(Object.keys(s).sort()).toEqual(['createdAt', 'name', 'scope', 'updatedAt']);

    const gone = await del(member, 'DEPLOY_TOKEN');
    expect(gone.statusCode).toBe(204);
    expect(gone.body).toBe('');
    expect((await list(member)).data.some((s) => s.name === 'DEPLOY_TOKEN')).toBe(false);
    expect(await resolveSecret(h.deps, member.orgId, member.userId, 'DEPLOY_TOKEN')).toBeNull();

    const again = await del(member, 'DEPLOY_TOKEN');
    expect(again.statusCode).toBe(404);
    expect(json(again).error.code).toBe('not_found');
    expect(json(again).error.message).toContain('DEPLOY_TOKEN');
  });

  it('records secret.created, secret.updated and secret.deleted with name and scope, never the value', async () => {
    const values = [secretValue('act1'), secretValue('act2')];
    expect((await put(admin, { name: 'AUDITED', value: values[0], scope: 'organization' })).statusCode).toBe(201);
    expect((await put(admin, { name: 'AUDITED', value: values[1], scope: 'organization' })).statusCode).toBe(200);
    expect((await del(admin, 'AUDITED', 'organization')).statusCode).toBe(204);
    const created = await expectActivity(h, admin, {
      eventType: 'secret.created',
      resourceType: 'secret',
      metadata: { name: 'AUDITED', scope: 'organization' },
    });
    await expectActivity(h, admin, {
      eventType: 'secret.updated',
      resourceType: 'secret',
      resourceId: created.resourceId,
      metadata: { name: 'AUDITED', scope: 'organization' },
    });
    await expectActivity(h, admin, {
      eventType: 'secret.deleted',
      resourceType: 'secret',
      resourceId: created.resourceId,
      metadata: { name: 'AUDITED', scope: 'organization' },
    });
    expect(created.actorUserId).toBe(admin.userId);

    // a member's own secret: the member reads their events; no event anywhere holds a value
    expect((await put(member, { name: 'MINE', value: values[0] })).statusCode).toBe(201);
    await expectActivity(h, member, { eventType: 'secret.created', metadata: { name: 'MINE', scope: 'user' } });
    const all = await h.app.inject({ method: 'GET', url: '/v1/activity?resource_type=secret&limit=200', headers: admin.headers });
    expect(all.statusCode).toBe(200);
    for (const v of values) expect(all.body).not.toContain(v);
  });

  it('normalizes names: upper-cased, other characters become "_", on create, delete and resolve', async () => {
    const value = secretValue('norm');
    const res = await put(member, { name: 'openai-api.key', value });
    expect(res.statusCode).toBe(201);
    expect(json(res).data.name).toBe('OPENAI_API_KEY');
    expect((await list(member)).data.map((s) => s.name)).toContain('OPENAI_API_KEY');
    expect(await resolveSecret(h.deps, member.orgId, member.userId, 'openai-api.key')).toBe(value);

    // the same name spelled differently replaces it rather than making a second secret
    expect((await put(member, { name: 'Openai_Api_Key', value: secretValue('norm2') })).statusCode).toBe(200);
    expect((await list(member)).data.filter((s) => s.name === 'OPENAI_API_KEY')).toHaveLength(1);

    expect((await del(member, 'openai-api.key')).statusCode).toBe(204);
    expect(await resolveSecret(h.deps, member.orgId, member.userId, 'OPENAI_API_KEY')).toBeNull();
  });

  it('refuses bad names with 400 naming the field', async () => {
    for (const name of ['1abc', '', '   ', '_LEADING', 'x'.repeat(129)]) {
      const res = await put(member, { name, value: 'v' });
      expect(res.statusCode, JSON.stringify(name)).toBe(400);
      expect(json(res).error.code).toBe('invalid_request');
      expect(json(res).error.message).toContain('name');
    }
    const badParam = await del(member, '1abc');
    expect(badParam.statusCode).toBe(400);
    expect(json(badParam).error.code).toBe('invalid_request');
  });

  it('refuses empty values, unknown scopes and unknown fields with 400', async () => {
    for (const body of [
      { name: 'EMPTY', value: '' },
      { name: 'NO_VALUE' },
      { name: 'BAD_SCOPE', value: 'v', scope: 'project' },
      { name: 'EXTRA', value: 'v', ownerId: 'usr_x' },
    ]) {
      const res = await put(member, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(json(res).error.code).toBe('invalid_request');
    }
    expect((await list(member)).data.map((s) => s.name)).not.toEqual(expect.arrayContaining(['EMPTY', 'NO_VALUE', 'BAD_SCOPE', 'EXTRA']));
  });

  it('takes a value of exactly 64 KiB and refuses one byte more with a 4xx error envelope', async () => {
    const exact = 'a'.repeat(64 * 1024);
    const ok = await put(member, { name: 'BIG_EXACT', value: exact });
    expect(ok.statusCode).toBe(201);
    expect(await resolveSecret(h.deps, member.orgId, member.userId, 'BIG_EXACT')).toBe(exact);

    const res = await put(member, { name: 'BIG_OVER', value: 'b'.repeat(64 * 1024 + 1) });
    expect(res.statusCode).toBeGreaterThanOrEqual(400);
    expect(res.statusCode).toBeLessThan(500);
    expect([400, 413]).toContain(res.statusCode);
    const err = json(res).error;
    expect(err.code).toMatch(/^(invalid_request|payload_too_large)$/);
    expect(err.message).toBeTruthy();
    expect(err.requestId).toBeTruthy();
    expect(await resolveSecret(h.deps, member.orgId, member.userId, 'BIG_OVER')).toBeNull();
  });

  describe('user scope is per user', () => {
    it('another member neither sees nor can delete my user secret', async () => {
      const value = secretValue('mine');
      expect((await put(member, { name: 'MY_PRIVATE', value })).statusCode).toBe(201);

      expect((await list(otherMember)).data.map((s) => s.name)).not.toContain('MY_PRIVATE');
      expect((await list(admin)).data.map((s) => s.name)).not.toContain('MY_PRIVATE');

      const res = await del(otherMember, 'MY_PRIVATE');
      expect(res.statusCode).toBe(404);
      expect(json(res).error.code).toBe('not_found');
      expect(await resolveSecret(h.deps, member.orgId, member.userId, 'MY_PRIVATE')).toBe(value);
      // nor does it reach them server-side
      expect(await resolveSecret(h.deps, member.orgId, otherMember.userId, 'MY_PRIVATE')).toBeNull();

      // the other member may hold a secret of the same name: each resolves to their own
      const theirs = secretValue('theirs');
      expect((await put(otherMember, { name: 'MY_PRIVATE', value: theirs })).statusCode).toBe(201);
      expect(await resolveSecret(h.deps, member.orgId, member.userId, 'MY_PRIVATE')).toBe(value);
      expect(await resolveSecret(h.deps, member.orgId, otherMember.userId, 'MY_PRIVATE')).toBe(theirs);
    });
  });

  describe('organization scope', () => {
    it('a member cannot create or delete organization secrets (403)', async () => {
      const res = await put(member, { name: 'ORG_BY_MEMBER', value: 'v', scope: 'organization' });
      expect(res.statusCode).toBe(403);
      expect(json(res).error.code).toBe('forbidden');
      expect(json(res).error.message).toContain('credentials:admin');
      expect((await list(admin)).data.map((s) => s.name)).not.toContain('ORG_BY_MEMBER');
    });

    it('an admin key without credentials:admin cannot either (403)', async () => {
      const key = await keyFor(
        h,
        admin,
        ALL_SCOPES.filter((s) => s !== 'credentials:admin'),
      );
      const res = await put({ headers: { 'x-api-key': key } }, { name: 'ORG_BY_LIMITED', value: 'v', scope: 'organization' });
      expect(res.statusCode).toBe(403);
      expect(json(res).error.message).toContain('credentials:admin');
      // the same key still manages its own user secrets
      expect((await put({ headers: { 'x-api-key': key } }, { name: 'ADMIN_OWN', value: 'v' })).statusCode).toBe(201);
    });

    it('an admin creates one, members see its name (not its value), only an admin deletes it', async () => {
      const value = secretValue('org');
      const created = await put(admin, { name: 'shared-token', value, scope: 'organization' });
      expect(created.statusCode).toBe(201);
      expect(created.body).not.toContain(value);
      expect(json(created).data).toMatchObject({ name: 'SHARED_TOKEN', scope: 'organization' });

      for (const actor of [member, otherMember, admin]) {
        const { res, data } = await list(actor);
        expect(data.filter((s) => s.name === 'SHARED_TOKEN')).toEqual([expect.objectContaining({ scope: 'organization' })]);
        expect(res.body).not.toContain(value);
      }
      expect(await resolveSecret(h.deps, admin.orgId, member.userId, 'SHARED_TOKEN')).toBe(value);
      expect(await resolveSecret(h.deps, admin.orgId, null, 'SHARED_TOKEN')).toBe(value);

      const byMember = await del(member, 'SHARED_TOKEN', 'organization');
      expect(byMember.statusCode).toBe(403);
      // without ?scope a member's delete addresses their own user secret, which does not exist
      expect((await del(member, 'SHARED_TOKEN')).statusCode).toBe(404);
      expect(await resolveSecret(h.deps, admin.orgId, member.userId, 'SHARED_TOKEN')).toBe(value);

      expect((await del(admin, 'SHARED_TOKEN', 'organization')).statusCode).toBe(204);
      expect((await list(member)).data.map((s) => s.name)).not.toContain('SHARED_TOKEN');
      expect((await del(admin, 'SHARED_TOKEN', 'organization')).statusCode).toBe(404);
    });

    it("a user secret wins over the organization's of the same name; both are listed", async () => {
      const orgValue = secretValue('org-wide');
      const userValue = secretValue('personal');
      expect((await put(admin, { name: 'MODEL_KEY', value: orgValue, scope: 'organization' })).statusCode).toBe(201);
      expect((await put(member, { name: 'MODEL_KEY', value: userValue })).statusCode).toBe(201);

      expect(await resolveSecret(h.deps, admin.orgId, member.userId, 'MODEL_KEY')).toBe(userValue);
      expect(await resolveSecret(h.deps, admin.orgId, otherMember.userId, 'MODEL_KEY')).toBe(orgValue);
      const mine = (await list(member)).data
        .filter((s) => s.name === 'MODEL_KEY')
        .map((s) => s.scope)
        .sort();
      expect(mine).toEqual(['organization', 'user']);

      // deleting my own falls back to the organization's
      expect((await del(member, 'MODEL_KEY', 'user')).statusCode).toBe(204);
      expect(await resolveSecret(h.deps, admin.orgId, member.userId, 'MODEL_KEY')).toBe(orgValue);
    });
  });

  it('stores values encrypted: the ciphertext holds neither the value nor its encodings', async () => {
    const value = secretValue('at-rest');
    expect((await put(member, { name: 'AT_REST', value })).statusCode).toBe(201);
    expect((await put(admin, { name: 'AT_REST_ORG', value, scope: 'organization' })).statusCode).toBe(201);
    const rows = (await storedRows(admin.orgId)).filter((r) => r.name === 'AT_REST' || r.name === 'AT_REST_ORG');
    expect(rows).toHaveLength(2);
    for (const row of rows) {
      expect(row.ciphertext).not.toContain(value);
      expect(row.ciphertext).not.toContain(Buffer.from(value).toString('base64'));
      expect(row.ciphertext).not.toContain(Buffer.from(value).toString('base64url'));
      expect(row.ciphertext).not.toContain(Buffer.from(value).toString('hex'));
    }
    // same value, two records: different ciphertexts
    expect(rows[0]!.ciphertext).not.toBe(rows[1]!.ciphertext);
    expect(await resolveSecret(h.deps, admin.orgId, member.userId, 'AT_REST')).toBe(value);
    expect(await resolveSecret(h.deps, admin.orgId, null, 'AT_REST_ORG')).toBe(value);
  });

  it('another organization never sees, resolves or deletes them', async () => {
    const userValue = secretValue('iso-user');
    const orgValue = secretValue('iso-org');
    expect((await put(member, { name: 'ISOLATED', value: userValue })).statusCode).toBe(201);
    expect((await put(admin, { name: 'ISOLATED_ORG', value: orgValue, scope: 'organization' })).statusCode).toBe(201);

    const { res, data } = await list(stranger);
    expect(data.map((s) => s.name)).not.toContain('ISOLATED');
    expect(data.map((s) => s.name)).not.toContain('ISOLATED_ORG');
    expect(data.map((s) => s.name)).not.toContain('SHARED_TOKEN');
    expect(res.body).not.toContain(userValue);

    expect((await del(stranger, 'ISOLATED_ORG', 'organization')).statusCode).toBe(404);
    expect((await del(stranger, 'ISOLATED')).statusCode).toBe(404);
    expect(await resolveSecret(h.deps, stranger.orgId, stranger.userId, 'ISOLATED_ORG')).toBeNull();
    expect(await resolveSecret(h.deps, stranger.orgId, member.userId, 'ISOLATED')).toBeNull();

    // and a same-named secret in the other organization is its own
    const theirs = secretValue('theirs');
    expect((await put(stranger, { name: 'ISOLATED_ORG', value: theirs, scope: 'organization' })).statusCode).toBe(201);
    expect(await resolveSecret(h.deps, stranger.orgId, stranger.userId, 'ISOLATED_ORG')).toBe(theirs);
    expect(await resolveSecret(h.deps, admin.orgId, admin.userId, 'ISOLATED_ORG')).toBe(orgValue);
  });
});

securitySuite('secrets', [
  { method: 'GET', url: () => '/v1/secrets', scope: 'secrets:read' },
  { method: 'POST', url: () => '/v1/secrets', scope: 'secrets:write', body: { name: 'SECURITY_CHECK', value: 'v' } },
  {
    method: 'DELETE',
    // the owner really holds the organization secret, so the stranger's 404 means "not yours", not "no such name"
    url: async (owner, h) => {
      const res = await h.app.inject({
        method: 'POST',
        url: '/v1/secrets',
        headers: owner.headers,
        payload: { name: 'OWNED', value: 'v', scope: 'organization' },
      });
      expect(res.statusCode).toBeLessThan(300);
      return '/v1/secrets/OWNED?scope=organization';
    },
    scope: 'secrets:write',
    crossOrg: true,
  },
]);
