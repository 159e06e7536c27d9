import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUser, issueSessionToken } from '../identity/index.js';
import { createHarness, createOrgAdmin, json, type Harness } from '../../../test/harness.js';

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
    const other = json(
      await h.app.inject({ method: 'GET', url: '/v1/billing/credits', headers: { ...auth, 'x-org-id': second.id } }),
    );
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
});
