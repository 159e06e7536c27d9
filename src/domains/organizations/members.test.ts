import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeOidcIssuer } from '../../../test/fakes/oidc.js';
import { addOrgMember, createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { expectActivity } from '../../../test/activity.js';
import { createUser } from '../identity/index.js';

describe('organization members', () => {
  let h: Harness;
  let issuer: FakeOidcIssuer;
  let admin: Actor;
  let member: Actor;

  beforeAll(async () => {
    issuer = await new FakeOidcIssuer().start();
    h = await createHarness({ HANGAR_OIDC_ISSUER: issuer.issuer, HANGAR_OIDC_AUDIENCE: 'hangar-test' });
    admin = await createOrgAdmin(h);
    member = await addOrgMember(h, admin, 'member');
  });
  afterAll(async () => {
    await h?.close();
    await issuer?.stop();
  });

  const members = (actor: Actor, org = actor.orgId) =>
    h.app.inject({ method: 'GET', url: `/v1/organizations/${org}/members`, headers: actor.headers });
  const add = (actor: Actor, body: Record<string, unknown>, org = actor.orgId) =>
    h.app.inject({ method: 'POST', url: `/v1/organizations/${org}/members`, headers: actor.headers, payload: body });
  const setRole = (actor: Actor, userId: string, role: string, org = actor.orgId) =>
    h.app.inject({ method: 'PATCH', url: `/v1/organizations/${org}/members/${userId}`, headers: actor.headers, payload: { role } });
  const remove = (actor: Actor, userId: string, org = actor.orgId) =>
    h.app.inject({ method: 'DELETE', url: `/v1/organizations/${org}/members/${userId}`, headers: actor.headers });
  const session = (a: Actor): Actor => ({
    ...a,
    headers: { authorization: `Bearer ${a.token}`, 'x-org-id': a.orgId } as unknown as Actor['headers'],
  });
  const me = (headers: Record<string, string>) => h.app.inject({ method: 'GET', url: '/v1/me', headers });

  it('an admin lists the members with their role and join time', async () => {
    const res = await members(admin);
    expect(res.statusCode, res.body).toBe(200);
    const list = json(res).data as Array<Record<string, unknown>>;
    expect(list.map((m) => [m.userId, m.role])).toEqual([
      [admin.userId, 'admin'],
      [member.userId, 'member'],
    ]);
    expect(list[0]).toMatchObject({ email: expect.stringContaining('@example.test'), name: 'Admin', invited: false, joinedAt: expect.any(String) });
  });

  it('members and other organizations’ admins cannot manage members', async () => {
    for (const res of [
      await members(member),
      await add(member, { email: 'x@example.test' }),
      await setRole(member, member.userId, 'admin'),
      await remove(member, admin.userId),
    ]) {
      expect(res.statusCode, res.body).toBe(403);
      expect(json(res).error.code).toBe('forbidden');
    }
    const stranger = await createOrgAdmin(h);
    for (const res of [
      await members(stranger, admin.orgId),
      await add(stranger, { email: 'x@example.test' }, admin.orgId),
      await setRole(stranger, member.userId, 'admin', admin.orgId),
      await remove(stranger, member.userId, admin.orgId),
    ]) {
      expect(res.statusCode, res.body).toBe(404);
    }
    expect(json(await members(admin)).data).toHaveLength(2);
  });

  it('adds an existing user by email (any case), who can then act in the organization; twice is 409', async () => {
    const user = await createUser(h.deps, { email: 'Dana@Example.test', name: 'Dana' });
    const res = await add(admin, { email: 'dana@example.TEST', role: 'member' });
    expect(res.statusCode, res.body).toBe(201);
    expect(json(res).data).toMatchObject({ userId: user.id, email: 'Dana@Example.test', name: 'Dana', role: 'member', invited: false });
    const again = await add(admin, { email: 'dana@example.test', role: 'admin' });
    expect(again.statusCode).toBe(409);
    expect(json(again).error.code).toBe('conflict');
  });

  it('adds someone who never signed in: their first sign-in with that verified email joins them', async () => {
    const res = await add(admin, { email: 'erin@example.test', role: 'admin' });
    expect(res.statusCode, res.body).toBe(201);
    const invited = json(res).data;
    expect(invited).toMatchObject({ email: 'erin@example.test', role: 'admin', invited: true, name: null });

    // An unverified email claims nothing: that is a different user, without the organization.
    const unverified = json(
      await me({ authorization: `Bearer ${await issuer.token({ sub: 'oidc|mallory', email: 'erin@example.test', emailVerified: false })}` }),
    ).data;
    expect(unverified.user.id).not.toBe(invited.userId);
    expect(unverified.organizations).toEqual([]);

    const token = await issuer.token({ sub: 'oidc|erin', email: 'Erin@example.test', emailVerified: true, name: 'Erin' });
    const first = json(await me({ authorization: `Bearer ${token}` })).data;
    expect(first.user).toMatchObject({ id: invited.userId, name: 'Erin' });
    expect(first.currentOrganizationId).toBe(admin.orgId);
    expect(first.scopes).toContain('org:admin');
    const listed = (json(await members(admin)).data as Array<{ userId: string; invited: boolean }>).find((m) => m.userId === invited.userId);
    expect(listed?.invited).toBe(false);
    // The same subject comes back as the same user.
    expect(json(await me({ authorization: `Bearer ${await issuer.token({ sub: 'oidc|erin' })}` })).data.user.id).toBe(invited.userId);
  });

  it('validates the body', async () => {
    for (const body of [{}, { email: 'not-an-email' }, { email: 'a@b.test', role: 'owner' }, { email: 'a@b.test', extra: 1 }]) {
      const res = await add(admin, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(json(res).error.code).toBe('invalid_request');
    }
    expect((await setRole(admin, member.userId, 'root')).statusCode).toBe(400);
    expect((await setRole(admin, 'nobody', 'admin')).statusCode).toBe(404);
    expect((await remove(admin, 'nobody')).statusCode).toBe(404);
  });

  it('changes roles, and refuses to demote or remove the last admin', async () => {
    // Session tokens: a key keeps the scopes it was made with, a session follows the role.
    const org = session(await createOrgAdmin(h));
    const other = session(await addOrgMember(h, org, 'member'));
    const demoteSelf = await setRole(org, org.userId, 'member');
    expect(demoteSelf.statusCode).toBe(409);
    expect(json(demoteSelf).error.message).toContain('last admin');
    expect((await remove(org, org.userId)).statusCode).toBe(409);

    const promoted = await setRole(org, other.userId, 'admin');
    expect(promoted.statusCode, promoted.body).toBe(200);
    expect(json(promoted).data.role).toBe('admin');
    // The new role applies to their very next request.
    expect((await members(other)).statusCode).toBe(200);
    expect((await setRole(org, org.userId, 'member')).statusCode).toBe(200);
    expect((await members(org)).statusCode).toBe(403);
    expect((await remove(other, other.userId)).statusCode).toBe(409);

    // Two admins demoting each other at once leave one admin.
    expect((await setRole(other, org.userId, 'admin')).statusCode).toBe(200);
    const [a, b] = await Promise.all([setRole(org, other.userId, 'member'), setRole(other, org.userId, 'member')]);
    // The loser is refused: 409 (last admin) or, when it was demoted before its own request was authenticated, 403.
    expect([a.statusCode, b.statusCode].filter((c) => c === 200)).toHaveLength(1);
    expect([a.statusCode, b.statusCode].every((c) => c === 200 || c === 409 || c === 403)).toBe(true);
    const roles = (json(await members(a.statusCode === 200 ? org : other)).data as Array<{ role: string }>).map((m) => m.role);
    expect(roles.filter((r) => r === 'admin')).toHaveLength(1);
  });

  it('removing a member revokes their keys in the organization and ends their access there', async () => {
    const gone = await addOrgMember(h, admin, 'member');
    expect((await me(gone.headers)).statusCode).toBe(200);
    const res = await remove(admin, gone.userId);
    expect(res.statusCode, res.body).toBe(204);
    expect((await me(gone.headers)).statusCode).toBe(401);
    const session = await me({ authorization: `Bearer ${gone.token}`, 'x-org-id': admin.orgId });
    expect(session.statusCode).toBe(404);
    const keys = json(await h.app.inject({ method: 'GET', url: '/v1/api-keys?include_revoked=true&limit=200', headers: admin.headers }))
      .data as Array<{ userId: string; revokedAt: string | null }>;
    const theirs = keys.filter((k) => k.userId === gone.userId);
    expect(theirs.length).toBeGreaterThan(0);
    expect(theirs.every((k) => k.revokedAt)).toBe(true);
    expect((json(await members(admin)).data as Array<{ userId: string }>).map((m) => m.userId)).not.toContain(gone.userId);
    // Added again, they are a member again (their old keys stay revoked).
    expect(
      (
        await add(admin, {
          email: (await h.deps.db.kysely.selectFrom('users').select('email').where('id', '=', gone.userId).executeTakeFirstOrThrow()).email!,
        })
      ).statusCode,
    ).toBe(201);
    expect((await me(gone.headers)).statusCode).toBe(401);
  });

  it('records member.added, member.role_changed and member.removed', async () => {
    const res = await h.app.inject({ method: 'GET', url: '/v1/activity?resource_type=organization&limit=200', headers: admin.headers });
    expect(res.statusCode, res.body).toBe(200);
    const types = (json(res).data.events as Array<{ eventType: string }>).map((e) => e.eventType);
    expect(types.length).toBeGreaterThan(0);
    for (const t of ['member.added', 'member.removed'])
      await expectActivity(h, admin, { eventType: t, resourceType: 'organization', resourceId: admin.orgId });
    const other = await createOrgAdmin(h);
    const m = await addOrgMember(h, other, 'member');
    expect((await setRole(other, m.userId, 'admin')).statusCode).toBe(200);
    const events = json(await h.app.inject({ method: 'GET', url: '/v1/activity?event_type=member.role_changed', headers: other.headers })).data
      .events;
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({
      resourceType: 'organization',
      resourceId: other.orgId,
      actorUserId: other.userId,
      metadata: { userId: m.userId, from: 'member', to: 'admin' },
    });
  });
});
