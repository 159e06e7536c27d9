import { generateKeyPair } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeOidcIssuer } from '../../../test/fakes/oidc.js';
import { createHarness, json, type Harness } from '../../../test/harness.js';

describe('session tokens from an OIDC issuer', () => {
  let issuer: FakeOidcIssuer;
  let h: Harness;

  beforeAll(async () => {
    issuer = await new FakeOidcIssuer().start();
    h = await createHarness({ HANGAR_OIDC_ISSUER: issuer.issuer, HANGAR_OIDC_AUDIENCE: 'hangar-test' });
  });
  afterAll(async () => {
    await h.close();
    await issuer.stop();
  });

  const me = (token: string) => h.app.inject({ method: 'GET', url: '/v1/me', headers: { authorization: `Bearer ${token}` } });

  it('creates the user on first sight of a verified subject, and only once', async () => {
    const token = await issuer.token({ sub: 'oidc|alice', email: 'alice@example.test', name: 'Alice' });
    const first = await me(token);
    expect(first.statusCode).toBe(200);
    const user = json(first).data.user;
    expect(user).toMatchObject({ email: 'alice@example.test', name: 'Alice' });
    expect(json(first).data.organizations).toEqual([]);

    const again = await me(await issuer.token({ sub: 'oidc|alice' }));
    expect(json(again).data.user.id).toBe(user.id);
    const rows = await h.deps.db.kysely.selectFrom('users').select('id').where('idp_subject', '=', 'oidc|alice').execute();
    expect(rows).toHaveLength(1);
    expect(issuer.jwksRequests).toBeGreaterThan(0);
  });

  it('lets a new OIDC user create an organization and then act in it', async () => {
    const token = await issuer.token({ sub: 'oidc|bob', email: 'bob@example.test' });
    const created = await h.app.inject({
      method: 'POST',
      url: '/v1/organizations',
      headers: { authorization: `Bearer ${token}` },
      payload: { name: 'Bob Co' },
    });
    expect(created.statusCode).toBe(201);
    const org = json(created).data;
    const profile = json(await me(token)).data;
    expect(profile.currentOrganizationId).toBe(org.id);
    expect(profile.scopes).toContain('org:admin');
  });

  it('a session without an organization may not reach organization routes', async () => {
    const token = await issuer.token({ sub: 'oidc|carol' });
    const res = await h.app.inject({ method: 'GET', url: '/v1/activity', headers: { authorization: `Bearer ${token}` } });
    expect(res.statusCode).toBe(403);
    expect(json(res).error.message).toContain('POST /v1/organizations');
  });

  it('refuses a wrong audience, an unpublished key, an expired token and a foreign issuer', async () => {
    const { privateKey } = await generateKeyPair('RS256');
    const bad = [
      await issuer.token({ sub: 'oidc|eve', aud: 'someone-else' }),
      await issuer.token({ sub: 'oidc|eve' }, privateKey),
      await issuer.token({ sub: 'oidc|eve', expiresIn: -60 }),
      await issuer.token({ sub: 'oidc|eve', iss: 'https://issuer.invalid' }),
    ];
    for (const token of bad) {
      const res = await me(token);
      expect(res.statusCode).toBe(401);
      expect(json(res).error.code).toBe('unauthenticated');
    }
    const rows = await h.deps.db.kysely.selectFrom('users').select('id').where('idp_subject', '=', 'oidc|eve').execute();
    expect(rows).toHaveLength(0);
  });
});
