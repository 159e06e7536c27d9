import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from './harness.js';

describe('paths that are not routes', () => {
  let h: Harness;
  let admin: Actor;
  beforeAll(async () => {
    h = await createHarness();
    admin = await createOrgAdmin(h);
  });
  afterAll(() => h.close());

  it('an unknown path is still a 404', async () => {
    const res = await h.app.inject({ method: 'GET', url: '/v1/agentz', headers: admin.headers });
    expect(res.statusCode).toBe(404);
    expect(json(res).error.code).toBe('not_found');
  });
});
