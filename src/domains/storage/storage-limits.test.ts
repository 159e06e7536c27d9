import { randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';

// Limits small enough to hit with a few bytes: a file may be 600 bytes, an organization may keep 1000.
const UPLOAD_LIMIT = 600;
const QUOTA = 1000;

/** Every file under the harness's blob store, relative to it. */
function blobFiles(h: Harness): string[] {
  const root = path.join(h.dataDir, 'blobs');
  try {
    return readdirSync(root, { recursive: true, withFileTypes: true })
      .filter((d) => d.isFile())
      .map((d) => path.relative(root, path.join(d.parentPath, d.name)))
      .sort();
  } catch {
    return [];
  }
}

function multipart(parts: Array<{ name: string; value?: string; filename?: string; data?: Buffer }>) {
  const boundary = `----limits${randomBytes(8).toString('hex')}`;
  const chunks: Buffer[] = [];
  for (const p of parts) {
    const disposition = `form-data; name="${p.name}"${p.filename !== undefined ? `; filename="${p.filename}"` : ''}`;
    const type = p.filename !== undefined ? 'Content-Type: application/octet-stream\r\n' : '';
    chunks.push(
      Buffer.from(`--${boundary}\r\nContent-Disposition: ${disposition}\r\n${type}\r\n`),
      p.data ?? Buffer.from(p.value ?? ''),
      Buffer.from('\r\n'),
    );
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { payload: Buffer.concat(chunks), contentType: `multipart/form-data; boundary=${boundary}` };
}

interface SocketReply {
  status?: number;
  body?: string;
  error?: string;
}

/**
 * Sends a PUT over a real socket with a chunked body (no Content-Length), the way a streaming
 * client does: light-my-request cannot model a server that stops reading part-way.
 */
function putChunked(address: string, url: string, headers: Record<string, string>, chunks: Buffer[], agent?: http.Agent): Promise<SocketReply> {
  return new Promise((resolve) => {
    const req = http.request(`${address}${url}`, { method: 'PUT', headers, agent }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', (err) => resolve({ error: String(err) }));
    // A guard so a server that never answers fails the test with a message rather than a hang.
    req.setTimeout(10_000, () => req.destroy(new Error('no response')));
    void (async () => {
      for (const chunk of chunks) {
        if (req.destroyed) return;
        await new Promise<void>((done) => req.write(chunk, () => done()));
        await new Promise((r) => setImmediate(r));
      }
      req.end();
    })();
  });
}

async function state(h: Harness, actor: Actor, ws: string) {
  const root = await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/files`, headers: actor.headers });
  const usage = await h.app.inject({ method: 'GET', url: '/v1/storage/usage', headers: actor.headers });
  return { entries: json(root).data, usedBytes: json(usage).data.usedBytes as number, blobs: blobFiles(h) };
}

describe('upload limit and storage quota', () => {
  let h: Harness;
  let address: string;

  beforeAll(async () => {
    h = await createHarness({ HANGAR_UPLOAD_LIMIT_BYTES: String(UPLOAD_LIMIT), HANGAR_STORAGE_QUOTA_BYTES: String(QUOTA) });
    address = await h.app.listen({ port: 0, host: '127.0.0.1' });
  });
  afterAll(() => h.close());

  const put = (actor: Actor, ws: string, p: string, payload: Buffer | Readable, headers: Record<string, string> = {}) =>
    h.app.inject({ method: 'PUT', url: `/v1/workspaces/${ws}/files/${p}`, headers: { ...actor.headers, ...headers }, payload });

  it('reports the configured quota', async () => {
    const admin = await createOrgAdmin(h);
    const usage = json(await h.app.inject({ method: 'GET', url: '/v1/storage/usage', headers: admin.headers })).data;
    expect(usage).toEqual({ usedBytes: 0, quotaBytes: QUOTA });
  });

  it('a file at the upload limit is accepted; one byte more is 413 payload_too_large with nothing left behind', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    expect((await put(admin, ws, 'exact.bin', randomBytes(UPLOAD_LIMIT))).statusCode).toBe(201);
    const before = await state(h, admin, ws);

    const res = await put(admin, ws, 'big.bin', randomBytes(UPLOAD_LIMIT + 1));
    expect(res.statusCode).toBe(413);
    expect(json(res).error.code).toBe('payload_too_large');
    expect(json(res).error.message).toContain(String(UPLOAD_LIMIT));
    expect(await state(h, admin, ws)).toEqual(before);
  });

  it('a streamed body without Content-Length over the limit is 413 payload_too_large, with no entry, blob or temporary file', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const before = await state(h, admin, ws);

    const chunks = Array.from({ length: 8 }, () => randomBytes(100));
    const res = await putChunked(address, `/v1/workspaces/${ws}/files/streamed.bin`, admin.headers, chunks);
    expect(res.status, res.body ?? res.error).toBe(413);
    expect(JSON.parse(res.body!).error.code).toBe('payload_too_large');
    expect(await state(h, admin, ws)).toEqual(before);
    expect(blobFiles(h).filter((f) => f.includes('.tmp-'))).toEqual([]);

    // The same through app.inject with a stream payload.
    const injected = await put(admin, ws, 'streamed.bin', Readable.from(chunks));
    expect(injected.statusCode).toBe(413);
    expect(json(injected).error.code).toBe('payload_too_large');
    expect(await state(h, admin, ws)).toEqual(before);

    // Under the limit, the same way of sending works and the bytes are whole.
    const small = Buffer.concat(chunks.slice(0, 5));
    const ok = await putChunked(address, `/v1/workspaces/${ws}/files/streamed.bin`, admin.headers, chunks.slice(0, 5));
    expect(ok.status, ok.body ?? ok.error).toBe(201);
    const dl = await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/files/streamed.bin`, headers: admin.headers });
    expect(dl.rawPayload.equals(small)).toBe(true);
  });

  it('after a refused streamed upload the same keep-alive connection still answers', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      for (let i = 0; i < 5; i++) {
        const chunks = Array.from({ length: 10 }, () => randomBytes(100));
        const res = await putChunked(address, `/v1/workspaces/${ws}/files/big-${i}.bin`, admin.headers, chunks, agent);
        expect(res.status, `upload ${i}: ${res.body ?? res.error}`).toBe(413);
      }
      const ok = await putChunked(address, `/v1/workspaces/${ws}/files/small.bin`, admin.headers, [randomBytes(10)], agent);
      expect(ok.status, ok.body ?? ok.error).toBe(201);
    } finally {
      agent.destroy();
    }
    expect((await state(h, admin, ws)).entries.map((e: { path: string }) => e.path)).toEqual(['small.bin']);
  });

  it('a stream body under the limit (app.inject) is stored whole', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const parts = [randomBytes(200), randomBytes(200), randomBytes(100)];
    const res = await put(admin, ws, 'stream.bin', Readable.from(parts), { 'content-type': 'application/octet-stream' });
    expect(res.statusCode).toBe(201);
    expect(json(res).data.size).toBe(500);
    const dl = await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/files/stream.bin`, headers: admin.headers });
    expect(dl.rawPayload.equals(Buffer.concat(parts))).toBe(true);
  });

  it('a multipart file over the limit is 413 payload_too_large and is not stored truncated', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const before = await state(h, admin, ws);
    for (const size of [UPLOAD_LIMIT + 1, UPLOAD_LIMIT + 2, UPLOAD_LIMIT * 3]) {
      const form = multipart([{ name: 'file', filename: `big-${size}.bin`, data: randomBytes(size) }]);
      const res = await h.app.inject({
        method: 'POST',
        url: `/v1/workspaces/${ws}/files`,
        headers: { ...admin.headers, 'content-type': form.contentType },
        payload: form.payload,
      });
      expect(res.statusCode, `${size}: ${res.body}`).toBe(413);
      expect(json(res).error.code).toBe('payload_too_large');
      expect(await state(h, admin, ws)).toEqual(before);
    }

    const exact = multipart([{ name: 'file', filename: 'exact.bin', data: randomBytes(UPLOAD_LIMIT) }]);
    const ok = await h.app.inject({
      method: 'POST',
      url: `/v1/workspaces/${ws}/files`,
      headers: { ...admin.headers, 'content-type': exact.contentType },
      payload: exact.payload,
    });
    expect(ok.statusCode, ok.body).toBe(201);
    expect(json(ok).data[0].size).toBe(UPLOAD_LIMIT);
  });

  it('a multipart form whose second file is too large keeps the first and says which part failed', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const form = multipart([
      { name: 'path', value: 'batch' },
      { name: 'file', filename: 'small.bin', data: randomBytes(10) },
      { name: 'file', filename: 'huge.bin', data: randomBytes(UPLOAD_LIMIT + 1) },
    ]);
    const res = await h.app.inject({
      method: 'POST',
      url: `/v1/workspaces/${ws}/files`,
      headers: { ...admin.headers, 'content-type': form.contentType },
      payload: form.payload,
    });
    expect(res.statusCode).toBe(413);
    expect(json(res).error.message).toMatch(/^batch\/huge\.bin: .*\(already stored: batch\/small\.bin\)$/);
    const list = json(await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/files?path=batch`, headers: admin.headers })).data;
    expect(list.map((e: { name: string }) => e.name)).toEqual(['small.bin']);
  });

  it('an upload past the organization’s quota is 413 quota_exceeded, with no entry, no blob and usage unchanged', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    expect((await put(admin, ws, 'a.bin', randomBytes(500))).statusCode).toBe(201);
    expect((await put(admin, ws, 'b.bin', randomBytes(400))).statusCode).toBe(201);
    const before = await state(h, admin, ws);
    expect(before.usedBytes).toBe(900);

    // With Content-Length.
    const res = await put(admin, ws, 'over/c.bin', randomBytes(101));
    expect(res.statusCode).toBe(413);
    expect(json(res).error.code).toBe('quota_exceeded');
    expect(await state(h, admin, ws)).toEqual(before); // no `over` folder either

    // Without Content-Length.
    const streamed = await putChunked(address, `/v1/workspaces/${ws}/files/over/d.bin`, admin.headers, [randomBytes(60), randomBytes(60)]);
    expect(streamed.status, streamed.body ?? streamed.error).toBe(413);
    expect(JSON.parse(streamed.body!).error.code).toBe('quota_exceeded');
    expect(await state(h, admin, ws)).toEqual(before);

    // Multipart.
    const form = multipart([
      { name: 'path', value: 'over' },
      { name: 'file', filename: 'e.bin', data: randomBytes(200) },
    ]);
    const mp = await h.app.inject({
      method: 'POST',
      url: `/v1/workspaces/${ws}/files`,
      headers: { ...admin.headers, 'content-type': form.contentType },
      payload: form.payload,
    });
    expect(mp.statusCode).toBe(413);
    expect(json(mp).error.code).toBe('quota_exceeded');
    expect(await state(h, admin, ws)).toEqual(before);

    // Exactly filling the quota is fine.
    expect((await put(admin, ws, 'fill.bin', randomBytes(100))).statusCode).toBe(201);
    expect((await state(h, admin, ws)).usedBytes).toBe(QUOTA);
    expect((await put(admin, ws, 'one-more.bin', Buffer.from('x'))).statusCode).toBe(413);
  });

  it('growing a file past the quota keeps the old version; shrinking and deleting free space', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const original = randomBytes(550);
    expect((await put(admin, ws, 'grow.bin', original)).statusCode).toBe(201);
    expect((await put(admin, ws, 'other.bin', randomBytes(450))).statusCode).toBe(201);
    const before = await state(h, admin, ws);
    expect(before.usedBytes).toBe(1000);

    const grown = await put(admin, ws, 'grow.bin', randomBytes(600));
    expect(grown.statusCode).toBe(413);
    expect(json(grown).error.code).toBe('quota_exceeded');
    expect(await state(h, admin, ws)).toEqual(before);
    const dl = await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/files/grow.bin`, headers: admin.headers });
    expect(dl.rawPayload.equals(original)).toBe(true);

    // Replacing with a smaller file is allowed even close to the quota, and frees the difference.
    expect((await put(admin, ws, 'grow.bin', randomBytes(50))).statusCode).toBe(200);
    expect((await state(h, admin, ws)).usedBytes).toBe(500);
    expect((await put(admin, ws, 'now-fits.bin', randomBytes(500))).statusCode).toBe(201);
    expect((await state(h, admin, ws)).usedBytes).toBe(1000);

    const gone = await h.app.inject({ method: 'DELETE', url: `/v1/workspaces/${ws}/files/now-fits.bin`, headers: admin.headers });
    expect(gone.statusCode).toBe(200);
    expect((await state(h, admin, ws)).usedBytes).toBe(500);
  });

  it('the quota is per organization', async () => {
    const first = await createOrgAdmin(h);
    const second = await createOrgAdmin(h);
    expect((await put(first, first.personalWorkspaceId, 'a.bin', randomBytes(UPLOAD_LIMIT))).statusCode).toBe(201);
    expect((await put(first, first.personalWorkspaceId, 'b.bin', randomBytes(UPLOAD_LIMIT))).statusCode).toBe(413);
    expect((await put(second, second.personalWorkspaceId, 'b.bin', randomBytes(UPLOAD_LIMIT))).statusCode).toBe(201);
  });

  it('a client that goes away mid-upload leaves nothing visible and no temporary file', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const before = await state(h, admin, ws);

    const req = http.request(`${address}/v1/workspaces/${ws}/files/half.bin`, { method: 'PUT', headers: admin.headers });
    req.on('error', () => undefined);
    req.write(randomBytes(300));
    // The server is writing the blob: a temporary file exists, but no entry does.
    await vi.waitFor(() => expect(blobFiles(h).some((f) => f.includes('.tmp-'))).toBe(true), { timeout: 10_000 });
    const during = await state(h, admin, ws);
    expect(during.entries).toEqual(before.entries);
    expect(during.usedBytes).toBe(before.usedBytes);
    const dl = await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/files/half.bin`, headers: admin.headers });
    expect(dl.statusCode).toBe(404);

    req.destroy();
    await vi.waitFor(() => expect(blobFiles(h)).toEqual(before.blobs), { timeout: 10_000 });
    expect(await state(h, admin, ws)).toEqual(before);
  });
});

describe('a quota smaller than the upload limit', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness({ HANGAR_UPLOAD_LIMIT_BYTES: '1000', HANGAR_STORAGE_QUOTA_BYTES: '100' });
  });
  afterAll(() => h.close());

  it('refuses a file larger than the whole quota as quota_exceeded, leaving nothing', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const before = await state(h, admin, ws);
    const res = await h.app.inject({ method: 'PUT', url: `/v1/workspaces/${ws}/files/x.bin`, headers: admin.headers, payload: randomBytes(101) });
    expect(res.statusCode).toBe(413);
    expect(json(res).error.code).toBe('quota_exceeded');
    expect(json(res).error.message).toContain('100');
    expect(await state(h, admin, ws)).toEqual(before);
  });
});
