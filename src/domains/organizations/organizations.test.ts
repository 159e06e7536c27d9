import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUser, issueSessionToken } from '../identity/index.js';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { expectActivity } from '../../../test/activity.js';
import { securitySuite } from '../../../test/security.js';

describe('organizations', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness();
  });
  afterAll(() => h.close());

  it('a new user creates an organization with everything it needs, and sign-up credits once', async () => {
    const user = await createUser(h.deps, { email: 'new@example.test' });
    const token = await issueSessionToken(h.deps.config, user.id);
    const auth = { authorization: `Bearer ${token}` };

    const me0 = json(await h.app.inject({ method: 'GET', url: '/v1/me', headers: auth }));
    expect(me0.data.organizations).toEqual([]);
    expect(me0.data.currentOrganizationId).toBeNull();

    const res = await h.app.inject({ method: 'POST', url: '/v1/organizations', headers: auth, payload: { name: 'Acme Labs' } });
    expect(res.statusCode).toBe(201);
    const org = json(res).data;
    expect(org).toMatchObject({ name: 'Acme Labs', slug: 'acme-labs', plan: 'free', enterprise: false, role: 'admin', orgRole: 'admin' });
    expect(org.idpOrgId).toMatch(/^org_/);
    expect(org.defaultProjectId).toMatch(/^[0-9a-f-]{36}$/);
    expect(org.personalWorkspaceId).toMatch(/^[0-9a-f-]{36}$/);

    const credits = json(await h.app.inject({ method: 'GET', url: '/v1/billing/credits', headers: auth }));
    expect(credits.data.balanceCents).toBe(h.deps.config.signupCreditsCents);

    // A second organization (a retry, or a real second one) grants nothing more.
    const second = json(await h.app.inject({ method: 'POST', url: '/v1/organizations', headers: auth, payload: { name: 'Acme Labs' } })).data;
    expect(second.slug).not.toBe('acme-labs');
    const other = json(await h.app.inject({ method: 'GET', url: '/v1/billing/credits', headers: { ...auth, 'x-org-id': second.id } }));
    expect(other.data.balanceCents).toBe(0);

    const files = await h.app.inject({ method: 'GET', url: `/v1/workspaces/${org.personalWorkspaceId}/files`, headers: auth });
    expect(files.statusCode).toBe(200);
    expect(json(files).data).toEqual([]);
  });

  it('validates the body', async () => {
    const admin = await createOrgAdmin(h);
    const res = await h.app.inject({ method: 'POST', url: '/v1/organizations', headers: admin.headers, payload: { name: '' } });
    expect(res.statusCode).toBe(400);
    expect(json(res).error.code).toBe('invalid_request');
  });

  describe('profile and organizations', () => {
    let admin: Actor;
    let member: Actor;
    beforeAll(async () => {
      admin = await createOrgAdmin(h, 'Profile Org');
      member = await addOrgMember(h, admin, 'member');
    });

    it('GET /v1/me describes the user, the credential and the organization it acts in', async () => {
      const res = await h.app.inject({ method: 'GET', url: '/v1/me', headers: admin.headers });
      expect(res.statusCode).toBe(200);
      const me = json(res).data;
      expect(me.user).toEqual({ id: admin.userId, email: expect.stringContaining('@example.test'), name: 'Admin', createdAt: expect.any(String) });
      expect(me.authType).toBe('api_key');
      expect(me.currentOrganizationId).toBe(admin.orgId);
      expect(me.defaultProjectId).toBe(admin.projectId);
      expect(me.scopes).toEqual([...me.scopes].sort());
      expect(me.scopes).toEqual(expect.arrayContaining(['org:admin', 'org:read', 'activity:read', 'billing:read']));
      expect(me.organizations).toHaveLength(1);
      expect(me.organizations[0]).toMatchObject({
        id: admin.orgId,
        name: 'Profile Org',
        role: 'admin',
        orgRole: 'admin',
        plan: 'free',
        enterprise: false,
        settings: {},
        defaultProjectId: admin.projectId,
        personalWorkspaceId: admin.personalWorkspaceId,
      });
    });

    it('a member sees their own role, Personal workspace and scopes', async () => {
      const me = json(await h.app.inject({ method: 'GET', url: '/v1/me', headers: { authorization: `Bearer ${member.token}` } })).data;
      expect(me.authType).toBe('session');
      expect(me.user.id).toBe(member.userId);
      expect(me.currentOrganizationId).toBe(admin.orgId);
      expect(me.scopes).not.toContain('org:admin');
      expect(me.scopes).not.toContain('billing:read');
      expect(me.organizations).toEqual([
        expect.objectContaining({ id: admin.orgId, role: 'member', orgRole: 'member', personalWorkspaceId: member.personalWorkspaceId }),
      ]);
      expect(member.personalWorkspaceId).not.toBe(admin.personalWorkspaceId);
    });

    it('a narrow key reports exactly its scopes', async () => {
      const key = await keyFor(h, admin, ['org:read']);
      const me = json(await h.app.inject({ method: 'GET', url: '/v1/me', headers: { 'x-api-key': key } })).data;
      expect(me.scopes).toEqual(['org:read']);
    });

    it('a session lists every organization of the user; an API key only its own', async () => {
      const auth = { authorization: `Bearer ${member.token}` };
      const own = json(
        await h.app.inject({ method: 'POST', url: '/v1/organizations', headers: auth, payload: { name: 'Member Side Project' } }),
      ).data;

      const res = await h.app.inject({ method: 'GET', url: '/v1/organizations', headers: auth });
      expect(res.statusCode).toBe(200);
      const orgs = json(res).data;
      expect(orgs.map((o: { id: string; role: string }) => [o.id, o.role])).toEqual([
        [admin.orgId, 'member'],
        [own.id, 'admin'],
      ]);
      expect(orgs[1]).toMatchObject({ name: 'Member Side Project', slug: 'member-side-project', idpOrgId: own.idpOrgId });

      const byKey = json(await h.app.inject({ method: 'GET', url: '/v1/organizations', headers: member.headers })).data;
      expect(byKey.map((o: { id: string }) => o.id)).toEqual([admin.orgId]);

      // The member's key may not read the other organization, though the member belongs to it.
      const other = await h.app.inject({ method: 'GET', url: `/v1/organizations/${own.id}`, headers: member.headers });
      expect(other.statusCode).toBe(404);
      const withSession = await h.app.inject({ method: 'GET', url: `/v1/organizations/${own.id}`, headers: auth });
      expect(withSession.statusCode).toBe(200);
      expect(json(withSession).data.role).toBe('admin');
    });

    it('GET /v1/organizations/:id returns the organization, and 404 for others', async () => {
      const res = await h.app.inject({ method: 'GET', url: `/v1/organizations/${admin.orgId}`, headers: member.headers });
      expect(res.statusCode).toBe(200);
      expect(json(res).data).toMatchObject({ id: admin.orgId, role: 'member', personalWorkspaceId: member.personalWorkspaceId });

      const stranger = await createOrgAdmin(h);
      for (const id of [stranger.orgId, '00000000-0000-4000-8000-000000000000']) {
        const miss = await h.app.inject({ method: 'GET', url: `/v1/organizations/${id}`, headers: member.headers });
        expect(miss.statusCode).toBe(404);
        expect(json(miss).error.code).toBe('not_found');
      }
    });
  });

  describe('projects and resource pins', () => {
    let admin: Actor;
    let member: Actor;
    beforeAll(async () => {
      admin = await createOrgAdmin(h);
      member = await addOrgMember(h, admin, 'member');
    });

    const pins = (actor: { headers: Record<string, string> }, projectId: string) =>
      h.app.inject({ method: 'GET', url: `/v1/projects/${projectId}/resource-pins`, headers: actor.headers });
    const putPins = (actor: { headers: Record<string, string> }, projectId: string, payload: unknown) =>
      h.app.inject({ method: 'PUT', url: `/v1/projects/${projectId}/resource-pins`, headers: actor.headers, payload: payload as object });

    it('records replacing the pins in the activity log', async () => {
      const res = await putPins(admin, admin.projectId, { items: [{ key: 'sandbox:abc' }, { key: 'thread:thr_1' }] });
      expect(res.statusCode).toBe(200);
      const act = json(
        await h.app.inject({ method: 'GET', url: `/v1/activity?resource_type=project&resource_id=${admin.projectId}`, headers: admin.headers }),
      ).data.events;
      expect(act[0]).toMatchObject({ eventType: 'project.resource_pins.updated', status: 'updated', summary: '2 pinned' });
      const pinned = await expectActivity(h, admin, {
        eventType: 'project.resource_pins.updated',
        resourceType: 'project',
        resourceId: admin.projectId,
      });
      expect(pinned).toMatchObject({ status: 'updated', summary: '2 pinned', actorUserId: admin.userId });
      expect((await putPins(admin, admin.projectId, { items: [] })).statusCode).toBe(200);
    });

    it('lists the default project with its workspace, and gets it by id', async () => {
      const res = await h.app.inject({ method: 'GET', url: '/v1/projects', headers: member.headers });
      expect(res.statusCode).toBe(200);
      const projects = json(res).data;
      expect(projects).toEqual([
        {
          id: admin.projectId,
          orgId: admin.orgId,
          name: 'Default',
          isDefault: true,
          workspaceId: expect.stringMatching(/^[0-9a-f-]{36}$/),
          createdAt: expect.any(String),
          updatedAt: expect.any(String),
        },
      ]);
      expect(projects[0].workspaceId).not.toBe(admin.personalWorkspaceId);
      expect(projects[0].workspaceId).not.toBe(member.personalWorkspaceId);

      const one = await h.app.inject({ method: 'GET', url: `/v1/projects/${admin.projectId}`, headers: member.headers });
      expect(one.statusCode).toBe(200);
      expect(json(one).data).toEqual(projects[0]);

      const missing = await h.app.inject({ method: 'GET', url: '/v1/projects/00000000-0000-4000-8000-000000000000', headers: member.headers });
      expect(missing.statusCode).toBe(404);
      expect(json(missing).error.code).toBe('not_found');
    });

    it('starts with no pins, replaces them as a whole and keeps their order', async () => {
      const empty = await pins(admin, admin.projectId);
      expect(empty.statusCode).toBe(200);
      expect(json(empty).data).toMatchObject({ projectId: admin.projectId, items: [] });

      const put = await putPins(member, admin.projectId, { items: [{ key: 'thread:thr_2' }, { key: ' sandbox:sbx_1 ' }, { key: 'agent:helper' }] });
      expect(put.statusCode).toBe(200);
      const saved = json(put).data;
      expect(saved.items).toEqual([{ key: 'thread:thr_2' }, { key: 'sandbox:sbx_1' }, { key: 'agent:helper' }]);
      expect(json(await pins(admin, admin.projectId)).data).toEqual(saved);

      const replaced = json(await putPins(admin, admin.projectId, { items: [{ key: 'agent:helper' }] })).data;
      expect(replaced.items).toEqual([{ key: 'agent:helper' }]);
      expect(json(await pins(member, admin.projectId)).data.items).toEqual([{ key: 'agent:helper' }]);

      const cleared = await putPins(admin, admin.projectId, { items: [] });
      expect(cleared.statusCode).toBe(200);
      expect(json(await pins(admin, admin.projectId)).data.items).toEqual([]);
    });

    it('accepts 200 pins and refuses 201', async () => {
      const many = Array.from({ length: 200 }, (_, i) => ({ key: `sandbox:${i}` }));
      const ok = await putPins(admin, admin.projectId, { items: many });
      expect(ok.statusCode).toBe(200);
      expect(json(ok).data.items).toHaveLength(200);

      const tooMany = await putPins(admin, admin.projectId, { items: [...many, { key: 'sandbox:200' }] });
      expect(tooMany.statusCode).toBe(400);
      expect(json(tooMany).error.code).toBe('invalid_request');
      expect(json(await pins(admin, admin.projectId)).data.items).toHaveLength(200);
    });

    it('refuses duplicate, empty and malformed pins and keeps the previous list', async () => {
      await putPins(admin, admin.projectId, { items: [{ key: 'agent:keep' }] });
      const bad: unknown[] = [
        { items: [{ key: 'agent:a' }, { key: 'agent:a' }] },
        { items: [{ key: 'agent:a' }, { key: ' agent:a ' }] },
        { items: [{ key: '' }] },
        { items: [{ key: '   ' }] },
        { items: [{ key: 'x'.repeat(301) }] },
        { items: [{}] },
        { items: ['agent:a'] },
        { items: 'agent:a' },
        {},
      ];
      for (const body of bad) {
        const res = await putPins(admin, admin.projectId, body);
        expect(res.statusCode, JSON.stringify(body)).toBe(400);
        expect(json(res).error.code).toBe('invalid_request');
        expect(json(res).error.issues?.length).toBeGreaterThan(0);
      }
      const dup = json(await putPins(admin, admin.projectId, { items: [{ key: 'agent:a' }, { key: 'agent:a' }] })).error;
      expect(dup.message).toContain('unique');
      expect(json(await pins(admin, admin.projectId)).data.items).toEqual([{ key: 'agent:keep' }]);
    });

    it('pins of an unknown project are 404', async () => {
      const res = await putPins(admin, '00000000-0000-4000-8000-000000000000', { items: [] });
      expect(res.statusCode).toBe(404);
      expect(json(res).error.code).toBe('not_found');
      expect((await pins(admin, '00000000-0000-4000-8000-000000000000')).statusCode).toBe(404);
    });

    it('a read-only key reads pins but cannot change them', async () => {
      const key = await keyFor(h, member, ['projects:read']);
      expect((await pins({ headers: { 'x-api-key': key } }, admin.projectId)).statusCode).toBe(200);
      const res = await putPins({ headers: { 'x-api-key': key } }, admin.projectId, { items: [] });
      expect(res.statusCode).toBe(403);
      expect(json(res).error.message).toContain('projects:write');
    });
  });
});

describe('organizations per user', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness({ HANGAR_MAX_ORGS_PER_USER: '3' });
  });
  afterAll(() => h.close());

  const createOrg = (token: string, name: string) =>
    h.app.inject({ method: 'POST', url: '/v1/organizations', headers: { authorization: `Bearer ${token}` }, payload: { name } });
  const balance = async (token: string, org: string) =>
    json(await h.app.inject({ method: 'GET', url: '/v1/billing/credits', headers: { authorization: `Bearer ${token}`, 'x-org-id': org } })).data
      .balanceCents;
  const signupGrants = (userId: string) =>
    h.deps.db.kysely
      .selectFrom('credit_ledger')
      .select(['org_id', 'amount_cents'])
      .where('kind', '=', 'signup_grant')
      .where('actor_user_id', '=', userId)
      .execute();

  it('a user creates at most HANGAR_MAX_ORGS_PER_USER organizations: the next is 429 limit_exceeded saying why', async () => {
    const user = await createUser(h.deps, { email: 'many@example.test' });
    const token = await issueSessionToken(h.deps.config, user.id);
    for (let i = 0; i < 3; i++) expect((await createOrg(token, `Mine ${i}`)).statusCode).toBe(201);
    const over = await createOrg(token, 'One too many');
    expect(over.statusCode, over.body).toBe(429);
    expect(json(over).error.code).toBe('limit_exceeded');
    expect(json(over).error.message).toContain('3 organizations');
    const mine = json(await h.app.inject({ method: 'GET', url: '/v1/organizations', headers: { authorization: `Bearer ${token}` } })).data;
    expect(mine).toHaveLength(3);
    // Being added to someone else's organization does not count against the user's own allowance.
    const other = await createOrgAdmin(h);
    const joiner = await createUser(h.deps, { email: 'joiner@example.test' });
    const joinerToken = await issueSessionToken(h.deps.config, joiner.id);
    const added = await h.app.inject({
      method: 'POST',
      url: `/v1/organizations/${other.orgId}/members`,
      headers: other.headers,
      payload: { email: 'joiner@example.test' },
    });
    expect(added.statusCode, added.body).toBe(201);
    for (let i = 0; i < 3; i++) expect((await createOrg(joinerToken, `Joiner ${i}`)).statusCode).toBe(201);
  });

  it('concurrent creates stay within the limit', async () => {
    const user = await createUser(h.deps, { email: 'burst@example.test' });
    const token = await issueSessionToken(h.deps.config, user.id);
    const results = await Promise.all(Array.from({ length: 6 }, (_, i) => createOrg(token, `Burst ${i}`)));
    expect(results.filter((r) => r.statusCode === 201)).toHaveLength(3);
    expect(results.filter((r) => r.statusCode === 429)).toHaveLength(3);
  });

  it('sign-up credits are granted once per user: not on a second organization, once under concurrent creates', async () => {
    const user = await createUser(h.deps, { email: 'credits@example.test' });
    const token = await issueSessionToken(h.deps.config, user.id);
    const first = json(await createOrg(token, 'First')).data;
    const second = json(await createOrg(token, 'Second')).data;
    expect(await balance(token, first.id)).toBe(h.deps.config.signupCreditsCents);
    expect(await balance(token, second.id)).toBe(0);
    expect(await signupGrants(user.id)).toHaveLength(1);

    const racer = await createUser(h.deps, { email: 'racer@example.test' });
    const racerToken = await issueSessionToken(h.deps.config, racer.id);
    const orgs = (await Promise.all([createOrg(racerToken, 'R1'), createOrg(racerToken, 'R2'), createOrg(racerToken, 'R3')])).map(
      (r) => json(r).data,
    );
    const grants = await signupGrants(racer.id);
    expect(grants).toHaveLength(1);
    const balances = await Promise.all(orgs.map((o) => balance(racerToken, o.id)));
    expect(balances.sort((a, b) => a - b)).toEqual([0, 0, h.deps.config.signupCreditsCents]);
  });
});

securitySuite('organizations and projects', [
  { method: 'POST', url: () => '/v1/organizations', scope: 'org:create', body: { name: 'Security Org' } },
  { method: 'GET', url: () => '/v1/organizations', scope: null },
  { method: 'GET', url: (o) => `/v1/organizations/${o.orgId}`, scope: 'org:read', crossOrg: true },
  { method: 'GET', url: () => '/v1/me', scope: null },
  { method: 'GET', url: (o) => `/v1/organizations/${o.orgId}/members`, scope: 'org:admin', crossOrg: true },
  { method: 'POST', url: (o) => `/v1/organizations/${o.orgId}/members`, scope: 'org:admin', body: { email: 'sec@example.test' }, crossOrg: true },
  { method: 'PATCH', url: (o) => `/v1/organizations/${o.orgId}/members/${o.userId}`, scope: 'org:admin', body: { role: 'admin' }, crossOrg: true },
  { method: 'DELETE', url: (o) => `/v1/organizations/${o.orgId}/members/${o.userId}`, scope: 'org:admin', crossOrg: true },
  { method: 'GET', url: () => '/v1/projects', scope: 'projects:read' },
  { method: 'GET', url: (o) => `/v1/projects/${o.projectId}`, scope: 'projects:read', crossOrg: true },
  { method: 'GET', url: (o) => `/v1/projects/${o.projectId}/resource-pins`, scope: 'projects:read', crossOrg: true },
  {
    method: 'PUT',
    url: (o) => `/v1/projects/${o.projectId}/resource-pins`,
    scope: 'projects:write',
    body: { items: [{ key: 'agent:x' }] },
    crossOrg: true,
  },
]);
