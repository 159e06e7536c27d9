import { randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';

// Requests in flight at once, as a client uploading a folder in parallel sends them. On PostgreSQL
// these run in concurrent transactions; the answers and the storage meter must not depend on it.
describe('concurrent requests', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness();
  });
  afterAll(() => h.close());

  const put = (a: Actor, ws: string, p: string, payload: Buffer | string) =>
    h.app.inject({ method: 'PUT', url: `/v1/workspaces/${ws}/files/${p}`, headers: a.headers, payload });
  const usedBytes = async (a: Actor) => json(await h.app.inject({ method: 'GET', url: '/v1/storage/usage', headers: a.headers })).data.usedBytes;
  const blobsOf = (a: Actor) => {
    try {
      return readdirSync(path.join(h.dataDir, 'blobs', 'orgs', a.orgId), { recursive: true, withFileTypes: true }).filter((d) => d.isFile()).length;
    } catch {
      return 0;
    }
  };
  const statuses = (responses: Array<{ statusCode: number }>) => responses.map((r) => r.statusCode).sort();

  it('parallel uploads into a folder that does not exist yet all succeed', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    for (let round = 0; round < 3; round++) {
      const responses = await Promise.all(Array.from({ length: 6 }, (_, i) => put(admin, ws, `batch${round}/deep/f${i}.txt`, `file ${i}`)));
      expect(statuses(responses), responses.map((r) => r.body).join('\n')).toEqual(Array(6).fill(201));
      const listed = json(
        await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/files?path=batch${round}/deep`, headers: admin.headers }),
      ).data;
      expect(listed).toHaveLength(6);
    }
    expect(await usedBytes(admin)).toBe(3 * 6 * 6);
  });

  it('parallel overwrites of one file keep the meter exact and leave one blob', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    expect((await put(admin, ws, 'same.bin', randomBytes(100))).statusCode).toBe(201);
    for (let round = 0; round < 3; round++) {
      const bodies = Array.from({ length: 4 }, (_, i) => randomBytes(10 + i));
      const responses = await Promise.all(bodies.map((b) => put(admin, ws, 'same.bin', b)));
      expect(statuses(responses)).toEqual([200, 200, 200, 200]);
      const stored = (await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/files/same.bin`, headers: admin.headers })).rawPayload;
      expect(bodies.some((b) => b.equals(stored))).toBe(true);
      expect(await usedBytes(admin)).toBe(stored.length);
      expect(blobsOf(admin)).toBe(1);
    }
  });

  it('parallel deletes of one file free its bytes once', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    expect((await put(admin, ws, 'keep.bin', randomBytes(7))).statusCode).toBe(201);
    for (let round = 0; round < 3; round++) {
      expect((await put(admin, ws, `gone${round}.bin`, randomBytes(10))).statusCode).toBe(201);
      const responses = await Promise.all(
        Array.from({ length: 4 }, () =>
          h.app.inject({ method: 'DELETE', url: `/v1/workspaces/${ws}/files/gone${round}.bin`, headers: admin.headers }),
        ),
      );
      expect(statuses(responses)).toEqual([200, 404, 404, 404]);
      expect(await usedBytes(admin)).toBe(7);
    }
    expect(blobsOf(admin)).toBe(1);
  });

  it('parallel moves of one file: one wins, the others find nothing to move', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    expect((await put(admin, ws, 'src.txt', 'moving')).statusCode).toBe(201);
    const responses = await Promise.all(
      ['a', 'b', 'c'].map((to) =>
        h.app.inject({ method: 'POST', url: `/v1/workspaces/${ws}/move`, headers: admin.headers, payload: { from: 'src.txt', to: `${to}.txt` } }),
      ),
    );
    expect(statuses(responses)).toEqual([200, 404, 404]);
    const root = json(await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/files`, headers: admin.headers })).data;
    expect(root).toHaveLength(1);
    expect(await usedBytes(admin)).toBe(6);
  });

  it('making the same folder in parallel is one 201 and the rest 200', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const responses = await Promise.all(
      Array.from({ length: 4 }, () =>
        h.app.inject({ method: 'POST', url: `/v1/workspaces/${ws}/folders`, headers: admin.headers, payload: { path: 'shared/dir' } }),
      ),
    );
    expect(statuses(responses)).toEqual([200, 200, 200, 201]);
    expect(new Set(responses.map((r) => json(r).data.id)).size).toBe(1);
  });
});
