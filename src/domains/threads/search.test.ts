import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';

describe('GET /v1/threads?q= (search, beyond the spec: the console’s thread search)', () => {
  let h: Harness;
  let a: Actor;
  let b: Actor;
  const ids: Record<string, string> = {};
  beforeAll(async () => {
    h = await createHarness();
    a = await createOrgAdmin(h);
    b = await createOrgAdmin(h);
    for (const title of ['Quarterly Numbers', 'quarterly review', '100% done', 'under_score', 'Other']) {
      const res = await h.app.inject({ method: 'POST', url: '/v1/threads', headers: a.headers, payload: { title } });
      expect(res.statusCode).toBe(201);
      ids[title] = json(res).data.id;
    }
    await h.app.inject({ method: 'POST', url: '/v1/threads', headers: b.headers, payload: { title: 'Quarterly of another org' } });
  });
  afterAll(() => h.close());

  const search = async (actor: Actor, q: string) => {
    const res = await h.app.inject({ method: 'GET', url: `/v1/threads?q=${encodeURIComponent(q)}`, headers: actor.headers });
    expect(res.statusCode, res.body).toBe(200);
    return (json(res).data as { title: string }[]).map((t) => t.title).sort();
  };

  it('matches words of the title case-insensitively, in the caller’s own threads only', async () => {
    expect(await search(a, 'QUARTERLY')).toEqual(['Quarterly Numbers', 'quarterly review']);
    expect(await search(b, 'quarterly')).toEqual(['Quarterly of another org']);
  });

  it('takes LIKE wildcards literally, and an exact id', async () => {
    expect(await search(a, '%')).toEqual(['100% done']);
    expect(await search(a, '_')).toEqual(['under_score']);
    expect(await search(a, ids.Other!)).toEqual(['Other']);
    expect(await search(b, ids.Other!)).toEqual([]);
  });

  it('refuses an empty or overlong search with a clear 400', async () => {
    for (const q of ['', ' ', 'x'.repeat(201)]) {
      const res = await h.app.inject({ method: 'GET', url: `/v1/threads?q=${encodeURIComponent(q)}`, headers: a.headers });
      expect(res.statusCode, q).toBe(400);
      expect(json(res).error.code).toBe('invalid_request');
    }
  });
});
