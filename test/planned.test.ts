import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from './harness.js';

describe('parts of the spec not built yet', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness();
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h.close());

  it('answer 501 not_implemented naming the feature, not a bare 404', async () => {
    for (const [method, url, feature] of [['POST', '/v1/workflows/x/triggers', 'workflow triggers']] as const) {
      const res = await h.app.inject({ method, url, headers: admin.headers });
      expect(res.statusCode, url).toBe(501);
      expect(res.headers['x-api-version']).toBe('v1');
      expect(json(res).error.code).toBe('not_implemented');
      expect(json(res).error.message).toContain(feature);
    }
  });

  it('an unknown path is still a 404', async () => {
    const res = await h.app.inject({ method: 'GET', url: '/v1/agentz', headers: admin.headers });
    expect(res.statusCode).toBe(404);
    expect(json(res).error.code).toBe('not_found');
  });
});
