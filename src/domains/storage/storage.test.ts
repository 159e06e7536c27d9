import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addOrgMember, createHarness, createOrgAdmin, json, keyFor, type Actor, type Harness } from '../../../test/harness.js';
import { expectActivity } from '../../../test/activity.js';

let h: Harness;
beforeAll(async () => {
  h = await createHarness();
});
afterAll(() => h.close());

// ---- helpers: talk HTTP the way a client would -----------------------------------------------

const enc = (p: string) => p.split('/').map(encodeURIComponent).join('/');
const fileUrl = (ws: string, p: string) => `/v1/workspaces/${ws}/files/${enc(p)}`;

function put(actor: Actor, ws: string, p: string, payload: Buffer | string, headers: Record<string, string> = {}) {
  return h.app.inject({ method: 'PUT', url: fileUrl(ws, p), headers: { ...actor.headers, ...headers }, payload });
}

async function upload(actor: Actor, ws: string, p: string, payload: Buffer | string, contentType?: string) {
  const res = await put(actor, ws, p, payload, contentType ? { 'content-type': contentType } : {});
  expect([200, 201], res.body).toContain(res.statusCode);
  return json(res).data;
}

function get(actor: Actor, ws: string, p: string, headers: Record<string, string> = {}, method: 'GET' | 'HEAD' = 'GET') {
  return h.app.inject({ method, url: fileUrl(ws, p), headers: { ...actor.headers, ...headers } });
}

async function list(actor: Actor, ws: string, folder?: string) {
  const res = await h.app.inject({
    method: 'GET',
    url: `/v1/workspaces/${ws}/files${folder === undefined ? '' : `?path=${encodeURIComponent(folder)}`}`,
    headers: actor.headers,
  });
  expect(res.statusCode, res.body).toBe(200);
  return json(res).data as Array<{ id: string; name: string; path: string; mimeType: string; type: string; size: number; mtime: string }>;
}

async function usedBytes(actor: Actor): Promise<number> {
  const res = await h.app.inject({ method: 'GET', url: '/v1/storage/usage', headers: actor.headers });
  expect(res.statusCode).toBe(200);
  return json(res).data.usedBytes;
}

function post(actor: Actor, url: string, payload: unknown) {
  return h.app.inject({ method: 'POST', url, headers: actor.headers, payload: payload as object });
}

function del(actor: Actor, ws: string, p: string, query = '') {
  return h.app.inject({ method: 'DELETE', url: `${fileUrl(ws, p)}${query}`, headers: actor.headers });
}

function multipart(parts: Array<{ name: string; value?: string; filename?: string; type?: string; data?: Buffer }>) {
  const boundary = `----hangar${randomBytes(8).toString('hex')}`;
  const chunks: Buffer[] = [];
  for (const p of parts) {
    const disposition = `form-data; name="${p.name}"${p.filename !== undefined ? `; filename="${p.filename}"` : ''}`;
    chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: ${disposition}\r\n${p.type ? `Content-Type: ${p.type}\r\n` : ''}\r\n`));
    chunks.push(p.data ?? Buffer.from(p.value ?? ''));
    chunks.push(Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { payload: Buffer.concat(chunks), contentType: `multipart/form-data; boundary=${boundary}` };
}

const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

async function projectWorkspaceId(actor: Actor): Promise<string> {
  const projects = json(await h.app.inject({ method: 'GET', url: '/v1/projects', headers: actor.headers })).data;
  const project = projects.find((p: { id: string }) => p.id === actor.projectId);
  expect(project.workspaceId).toBeTruthy();
  return project.workspaceId;
}

// ---- workspaces -------------------------------------------------------------------------------

describe('workspaces', () => {
  it('lists the project workspace and the caller’s own Personal workspace, never another member’s', async () => {
    const admin = await createOrgAdmin(h);
    const member = await addOrgMember(h, admin);
    const projectWs = await projectWorkspaceId(admin);

    const mine = json(await h.app.inject({ method: 'GET', url: '/v1/workspaces', headers: admin.headers })).data;
    expect(mine.map((w: { id: string }) => w.id).sort()).toEqual([admin.personalWorkspaceId, projectWs].sort());
    const personal = mine.find((w: { kind: string }) => w.kind === 'personal');
    expect(personal).toMatchObject({ id: admin.personalWorkspaceId, orgId: admin.orgId, ownerUserId: admin.userId, projectId: null });
    expect(personal.createdAt).toMatch(ISO);
    expect(mine.find((w: { kind: string }) => w.kind === 'project')).toMatchObject({ id: projectWs, projectId: admin.projectId, ownerUserId: null });

    const theirs = json(await h.app.inject({ method: 'GET', url: '/v1/workspaces', headers: member.headers })).data;
    expect(theirs.map((w: { id: string }) => w.id).sort()).toEqual([member.personalWorkspaceId, projectWs].sort());

    const one = await h.app.inject({ method: 'GET', url: `/v1/workspaces/${projectWs}`, headers: member.headers });
    expect(one.statusCode).toBe(200);
    expect(json(one).data).toMatchObject({ id: projectWs, kind: 'project' });
  });

  it('another member’s Personal workspace, another organization’s workspace and an unknown id are 404', async () => {
    const admin = await createOrgAdmin(h);
    const member = await addOrgMember(h, admin);
    const stranger = await createOrgAdmin(h);
    await upload(admin, admin.personalWorkspaceId, 'secret.txt', 'admin only');
    await upload(admin, await projectWorkspaceId(admin), 'shared.txt', 'for the project');

    const urls = (ws: string) => [
      { method: 'GET' as const, url: `/v1/workspaces/${ws}` },
      { method: 'GET' as const, url: `/v1/workspaces/${ws}/files` },
      { method: 'GET' as const, url: `/v1/workspaces/${ws}/files/secret.txt` },
      { method: 'HEAD' as const, url: `/v1/workspaces/${ws}/files/secret.txt` },
      { method: 'GET' as const, url: `/v1/workspaces/${ws}/activity` },
      { method: 'DELETE' as const, url: `/v1/workspaces/${ws}/files/secret.txt` },
    ];
    for (const [actor, ws] of [
      [member, admin.personalWorkspaceId],
      [stranger, admin.personalWorkspaceId],
      [stranger, await projectWorkspaceId(admin)],
      [admin, member.personalWorkspaceId],
      [admin, '00000000-0000-0000-0000-000000000000'],
    ] as const) {
      for (const { method, url } of urls(ws)) {
        const res = await h.app.inject({ method, url, headers: actor.headers });
        expect(res.statusCode, `${method} ${url}`).toBe(404);
        if (method !== 'HEAD') expect(json(res).error.code).toBe('not_found');
      }
      const write = await put(actor, ws, 'intruder.txt', 'x');
      expect(write.statusCode).toBe(404);
      expect((await post(actor, `/v1/workspaces/${ws}/folders`, { path: 'intruder' })).statusCode).toBe(404);
      expect((await post(actor, `/v1/workspaces/${ws}/move`, { from: 'secret.txt', to: 'mine.txt' })).statusCode).toBe(404);
    }
    // Nothing changed in the admin's Personal workspace.
    expect((await list(admin, admin.personalWorkspaceId)).map((e) => e.path)).toEqual(['secret.txt']);
  });

  it('a member uses the organization’s project workspace: reads the admin’s files and writes their own', async () => {
    const admin = await createOrgAdmin(h);
    const member = await addOrgMember(h, admin);
    const ws = await projectWorkspaceId(admin);
    await upload(admin, ws, 'plan.md', '# plan', 'text/markdown');

    const dl = await get(member, ws, 'plan.md');
    expect(dl.statusCode).toBe(200);
    expect(dl.body).toBe('# plan');

    expect((await put(member, ws, 'notes/member.txt', 'hi')).statusCode).toBe(201);
    expect((await list(admin, ws)).map((e) => e.path)).toEqual(['notes', 'plan.md']);
    expect((await get(admin, ws, 'notes/member.txt')).body).toBe('hi');
  });
});

// ---- upload and download --------------------------------------------------------------------------

describe('upload and download', () => {
  it('a raw upload downloads byte-identical with its Content-Type, Content-Length, ETag and Last-Modified', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const res = await put(admin, ws, 'hello.txt', 'hello, world', { 'content-type': 'text/plain; charset=utf-8' });
    expect(res.statusCode).toBe(201);
    const entry = json(res).data;
    expect(Object.keys(entry).sort()).toEqual(['id', 'mimeType', 'mtime', 'name', 'path', 'size', 'type']);
    expect(entry).toMatchObject({ name: 'hello.txt', path: 'hello.txt', mimeType: 'text/plain', type: 'file', size: 12 });
    expect(entry.id).toEqual(expect.any(String));
    expect(entry.mtime).toMatch(ISO);
    expect(json(res).meta.requestId).toBe(res.headers['x-request-id']);

    const dl = await get(admin, ws, 'hello.txt');
    expect(dl.statusCode).toBe(200);
    expect(dl.body).toBe('hello, world');
    expect(dl.headers['content-type']).toMatch(/^text\/plain\b/);
    expect(dl.headers['content-length']).toBe('12');
    expect(dl.headers['accept-ranges']).toBe('bytes');
    expect(dl.headers.etag).toBe(`"${sha256('hello, world')}"`);
    expect(new Date(dl.headers['last-modified'] as string).getTime()).toBe(Math.floor(Date.parse(entry.mtime) / 1000) * 1000);
  });

  it('serves an uploaded HTML file so that a browser will not run it in the API origin', async () => {
    const admin = await createOrgAdmin(h);
    await put(admin, admin.personalWorkspaceId, 'page.html', '<script>alert(1)</script>', { 'content-type': 'text/html' });
    const dl = await get(admin, admin.personalWorkspaceId, 'page.html');
    expect(dl.statusCode).toBe(200);
    expect(dl.headers['x-content-type-options']).toBe('nosniff');
    expect(dl.headers['content-security-policy']).toMatch(/^sandbox/);
  });

  it('random binary content round-trips exactly', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const data = randomBytes(300 * 1024 + 7);
    const entry = await upload(admin, ws, 'bin/blob.dat', data, 'application/octet-stream');
    expect(entry.size).toBe(data.length);

    const dl = await get(admin, ws, 'bin/blob.dat');
    expect(dl.statusCode).toBe(200);
    expect(dl.rawPayload.equals(data)).toBe(true);
    expect(dl.headers['content-length']).toBe(String(data.length));
    expect(dl.headers.etag).toBe(`"${sha256(data)}"`);
  });

  it('takes the type from Content-Type, or guesses it from the name when absent or generic', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    const cases: Array<[string, Buffer | string, Record<string, string>, string]> = [
      ['declared.bin', png, { 'content-type': 'image/png' }, 'image/png'],
      ['Photo.PNG', png, { 'content-type': 'application/octet-stream' }, 'image/png'],
      ['absent.json', Buffer.from('{"a":1}'), {}, 'application/json'],
      ['page.html', 'x=1', { 'content-type': 'application/x-www-form-urlencoded' }, 'text/html'],
      ['data.csv', 'a,b', { 'content-type': 'Text/CSV; charset=UTF-8' }, 'text/csv'],
      ['mystery.zzqx', png, {}, 'application/octet-stream'],
      ['no-extension', png, { 'content-type': 'application/octet-stream' }, 'application/octet-stream'],
    ];
    for (const [name, body, headers, expected] of cases) {
      const res = await put(admin, ws, name, body, headers);
      expect(res.statusCode, name).toBe(201);
      expect(json(res).data.mimeType, name).toBe(expected);
      const dl = await get(admin, ws, name);
      expect(dl.headers['content-type'], name).toMatch(new RegExp(`^${expected.replace(/[/+.]/g, '\\$&')}\\b`));
      expect(dl.rawPayload.equals(Buffer.from(body)), name).toBe(true);
    }
  });

  it('an empty file is stored and downloads as zero bytes', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const res = await put(admin, ws, 'empty.txt', Buffer.alloc(0), { 'content-type': 'text/plain' });
    expect(res.statusCode).toBe(201);
    expect(json(res).data.size).toBe(0);
    const dl = await get(admin, ws, 'empty.txt');
    expect(dl.statusCode).toBe(200);
    expect(dl.headers['content-length']).toBe('0');
    expect(dl.rawPayload.length).toBe(0);
  });

  it('overwriting answers 200, keeps the id, replaces the content and moves the storage meter by the difference', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const first = await put(admin, ws, 'doc.txt', 'version one is longer', { 'content-type': 'text/plain' });
    expect(first.statusCode).toBe(201);
    expect(await usedBytes(admin)).toBe(21);

    const second = await put(admin, ws, 'doc.txt', '{"v":2}', { 'content-type': 'application/json' });
    expect(second.statusCode).toBe(200);
    expect(json(second).data).toMatchObject({ id: json(first).data.id, size: 7, mimeType: 'application/json' });
    expect(Date.parse(json(second).data.mtime)).toBeGreaterThanOrEqual(Date.parse(json(first).data.mtime));

    const dl = await get(admin, ws, 'doc.txt');
    expect(dl.body).toBe('{"v":2}');
    expect(dl.headers['content-length']).toBe('7');
    expect(dl.headers['content-type']).toMatch(/^application\/json/);
    expect(await list(admin, ws)).toHaveLength(1);
    expect(await usedBytes(admin)).toBe(7);
  });

  it('creates missing parent folders and lists folders first, then files, by name', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    await upload(admin, ws, 'zeta.txt', 'z');
    await upload(admin, ws, 'alpha.txt', 'a');
    await upload(admin, ws, 'projects/2026/q1/report.csv', 'a,b\n1,2\n', 'text/csv');
    await upload(admin, ws, 'projects/readme.md', '# hi');
    await upload(admin, ws, 'archive/old.txt', 'old');
    await upload(admin, ws, 'beta/x.txt', 'x');

    const root = await list(admin, ws);
    expect(root.map((e) => [e.type, e.path])).toEqual([
      ['folder', 'archive'],
      ['folder', 'beta'],
      ['folder', 'projects'],
      ['file', 'alpha.txt'],
      ['file', 'zeta.txt'],
    ]);
    for (const e of root) {
      expect(Object.keys(e).sort()).toEqual(['id', 'mimeType', 'mtime', 'name', 'path', 'size', 'type']);
      expect(e.mtime).toMatch(ISO);
    }
    expect(root[0]).toMatchObject({ name: 'archive', mimeType: 'inode/directory', size: 0 });
    expect(root[3]).toMatchObject({ name: 'alpha.txt', mimeType: 'text/plain', size: 1 });

    const projects = await list(admin, ws, 'projects');
    expect(projects.map((e) => [e.type, e.name, e.path])).toEqual([
      ['folder', '2026', 'projects/2026'],
      ['file', 'readme.md', 'projects/readme.md'],
    ]);
    expect(await list(admin, ws, 'projects/2026')).toMatchObject([{ type: 'folder', path: 'projects/2026/q1', size: 0 }]);
    expect(await list(admin, ws, 'projects/2026/q1/')).toMatchObject([
      { type: 'file', name: 'report.csv', path: 'projects/2026/q1/report.csv', mimeType: 'text/csv', size: 8 },
    ]);
    // `?path=` empty is the root.
    expect((await list(admin, ws, '')).map((e) => e.path)).toEqual(root.map((e) => e.path));
  });

  it('keeps names with spaces and non-ASCII characters, addressed URL-encoded', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const entry = await upload(admin, ws, 'my docs/résumé 2026 (final)#1?.txt', 'cv');
    expect(entry).toMatchObject({ name: 'résumé 2026 (final)#1?.txt', path: 'my docs/résumé 2026 (final)#1?.txt' });
    expect((await get(admin, ws, 'my docs/résumé 2026 (final)#1?.txt')).body).toBe('cv');
    expect((await list(admin, ws, 'my docs')).map((e) => e.name)).toEqual(['résumé 2026 (final)#1?.txt']);
  });

  it('answers 404 for a missing file or folder, 400 for downloading a folder or listing a file, 409 for a file over a folder', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    await upload(admin, ws, 'dir/file.txt', 'x');

    const missing = await get(admin, ws, 'dir/nope.txt');
    expect(missing.statusCode).toBe(404);
    expect(json(missing).error.code).toBe('not_found');
    const missingFolder = await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/files?path=nope`, headers: admin.headers });
    expect(missingFolder.statusCode).toBe(404);

    const folder = await get(admin, ws, 'dir');
    expect(folder.statusCode).toBe(400);
    expect(json(folder).error.message).toMatch(/^path: .*folder/);
    const listFile = await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/files?path=dir/file.txt`, headers: admin.headers });
    expect(listFile.statusCode).toBe(400);
    expect(json(listFile).error.message).toMatch(/^path: /);

    const overFolder = await put(admin, ws, 'dir', 'x');
    expect(overFolder.statusCode).toBe(409);
    expect(json(overFolder).error.code).toBe('conflict');
    const underFile = await put(admin, ws, 'dir/file.txt/child.txt', 'x');
    expect(underFile.statusCode).toBe(409);
    expect(json(underFile).error.code).toBe('conflict');
    expect(await usedBytes(admin)).toBe(1);
    expect((await list(admin, ws, 'dir')).map((e) => e.path)).toEqual(['dir/file.txt']);
  });
});

// ---- ranges and HEAD ------------------------------------------------------------------------------

describe('Range and HEAD', () => {
  let admin: Actor;
  let ws: string;
  const content = '0123456789abcdef'; // 16 bytes

  beforeAll(async () => {
    admin = await createOrgAdmin(h);
    ws = admin.personalWorkspaceId;
    await upload(admin, ws, 'r.txt', content, 'text/plain');
  });

  it.each([
    ['bytes=0-4', '01234', 'bytes 0-4/16'],
    ['bytes=-3', 'def', 'bytes 13-15/16'],
    ['bytes=5-', '56789abcdef', 'bytes 5-15/16'],
    ['bytes=10-100', 'abcdef', 'bytes 10-15/16'],
    ['bytes=-100', content, 'bytes 0-15/16'],
    ['bytes=15-15', 'f', 'bytes 15-15/16'],
  ])('%s is 206 with Content-Range', async (range, body, contentRange) => {
    const res = await get(admin, ws, 'r.txt', { range });
    expect(res.statusCode).toBe(206);
    expect(res.body).toBe(body);
    expect(res.headers['content-range']).toBe(contentRange);
    expect(res.headers['content-length']).toBe(String(body.length));
    expect(res.headers['content-type']).toMatch(/^text\/plain/);
  });

  it.each(['bytes=16-', 'bytes=100-200', 'bytes=-0'])('%s is 416 with Content-Range: bytes */size', async (range) => {
    const res = await get(admin, ws, 'r.txt', { range });
    expect(res.statusCode).toBe(416);
    expect(res.headers['content-range']).toBe('bytes */16');
    expect(json(res).error.code).toBe('range_not_satisfiable');
  });

  it('ignores a malformed or multi-part range and sends the whole file', async () => {
    for (const range of ['bytes=0-1,3-4', 'items=0-4', 'bytes=5-2', 'bytes=x-y', 'bytes=-']) {
      const res = await get(admin, ws, 'r.txt', { range });
      expect(res.statusCode, range).toBe(200);
      expect(res.body).toBe(content);
    }
  });

  it('any range of an empty file is 416', async () => {
    await upload(admin, ws, 'empty.bin', Buffer.alloc(0));
    const res = await get(admin, ws, 'empty.bin', { range: 'bytes=0-' });
    expect(res.statusCode).toBe(416);
    expect(res.headers['content-range']).toBe('bytes */0');
  });

  it('HEAD gives the download headers without a body', async () => {
    const getRes = await get(admin, ws, 'r.txt');
    const head = await get(admin, ws, 'r.txt', {}, 'HEAD');
    expect(head.statusCode).toBe(200);
    expect(head.rawPayload.length).toBe(0);
    expect(head.headers['content-length']).toBe('16');
    for (const name of ['content-type', 'etag', 'last-modified', 'accept-ranges']) {
      expect(head.headers[name], name).toBe(getRes.headers[name]);
    }

    const ranged = await get(admin, ws, 'r.txt', { range: 'bytes=2-5' }, 'HEAD');
    expect(ranged.statusCode).toBe(206);
    expect(ranged.rawPayload.length).toBe(0);
    expect(ranged.headers['content-range']).toBe('bytes 2-5/16');
    expect(ranged.headers['content-length']).toBe('4');

    const bad = await get(admin, ws, 'r.txt', { range: 'bytes=99-' }, 'HEAD');
    expect(bad.statusCode).toBe(416);
    expect(bad.headers['content-range']).toBe('bytes */16');

    expect((await get(admin, ws, 'nope.txt', {}, 'HEAD')).statusCode).toBe(404);
  });

  it('HEAD needs a credential and the storage:read scope', async () => {
    const anonymous = await h.app.inject({ method: 'HEAD', url: fileUrl(ws, 'r.txt') });
    expect(anonymous.statusCode).toBe(401);
    const key = await keyFor(h, admin, ['storage:write']);
    const noScope = await h.app.inject({ method: 'HEAD', url: fileUrl(ws, 'r.txt'), headers: { 'x-api-key': key } });
    expect(noScope.statusCode).toBe(403);
  });
});

// ---- multipart --------------------------------------------------------------------------------

describe('multipart upload', () => {
  it('stores each file part under the `path` folder, with the part’s type or a guess', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const image = randomBytes(2048);
    const form = multipart([
      { name: 'path', value: 'uploads/today' },
      { name: 'file', filename: 'notes.txt', type: 'text/plain', data: Buffer.from('first file') },
      { name: 'file', filename: 'image.png', type: 'application/octet-stream', data: image },
    ]);
    const res = await h.app.inject({
      method: 'POST',
      url: `/v1/workspaces/${ws}/files`,
      headers: { ...admin.headers, 'content-type': form.contentType },
      payload: form.payload,
    });
    expect(res.statusCode, res.body).toBe(201);
    const written = json(res).data;
    expect(written).toHaveLength(2);
    expect(written[0]).toMatchObject({ name: 'notes.txt', path: 'uploads/today/notes.txt', mimeType: 'text/plain', type: 'file', size: 10 });
    expect(written[1]).toMatchObject({ name: 'image.png', path: 'uploads/today/image.png', mimeType: 'image/png', type: 'file', size: 2048 });

    expect((await list(admin, ws, 'uploads/today')).map((e) => e.name)).toEqual(['image.png', 'notes.txt']);
    expect((await get(admin, ws, 'uploads/today/notes.txt')).body).toBe('first file');
    expect((await get(admin, ws, 'uploads/today/image.png')).rawPayload.equals(image)).toBe(true);
    expect(await usedBytes(admin)).toBe(10 + 2048);
  });

  it('without a `path` field writes to the root; a form without files is 400; JSON is 415', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const send = (form: ReturnType<typeof multipart>) =>
      h.app.inject({
        method: 'POST',
        url: `/v1/workspaces/${ws}/files`,
        headers: { ...admin.headers, 'content-type': form.contentType },
        payload: form.payload,
      });

    const root = await send(multipart([{ name: 'upload', filename: 'top.md', type: 'application/octet-stream', data: Buffer.from('# top') }]));
    expect(root.statusCode).toBe(201);
    expect(json(root).data[0]).toMatchObject({ path: 'top.md', mimeType: 'text/markdown' });

    const noFiles = await send(multipart([{ name: 'path', value: 'x' }]));
    expect(noFiles.statusCode).toBe(400);
    expect(json(noFiles).error.code).toBe('invalid_request');

    const asJson = await post(admin, `/v1/workspaces/${ws}/files`, { path: 'x' });
    expect(asJson.statusCode).toBe(415);
    expect(json(asJson).error.code).toBe('unsupported_media_type');
    expect((await list(admin, ws)).map((e) => e.path)).toEqual(['top.md']);
  });
});

// ---- folders ----------------------------------------------------------------------------------

describe('folders', () => {
  it('making a folder is 201, again is 200, and parents are created', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const first = await post(admin, `/v1/workspaces/${ws}/folders`, { path: 'a/b/c' });
    expect(first.statusCode).toBe(201);
    expect(json(first).data).toMatchObject({ name: 'c', path: 'a/b/c', type: 'folder', mimeType: 'inode/directory', size: 0 });

    const again = await post(admin, `/v1/workspaces/${ws}/folders`, { path: 'a/b/c/' });
    expect(again.statusCode).toBe(200);
    expect(json(again).data.id).toBe(json(first).data.id);

    expect((await list(admin, ws)).map((e) => [e.type, e.path])).toEqual([['folder', 'a']]);
    expect((await list(admin, ws, 'a')).map((e) => [e.type, e.path])).toEqual([['folder', 'a/b']]);
    expect(await list(admin, ws, 'a/b/c')).toEqual([]);
    expect(await usedBytes(admin)).toBe(0);
  });

  it('a file standing at the path (or above it) is 409', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    await upload(admin, ws, 'taken', 'file');
    const res = await post(admin, `/v1/workspaces/${ws}/folders`, { path: 'taken' });
    expect(res.statusCode).toBe(409);
    expect(json(res).error.code).toBe('conflict');
    expect((await post(admin, `/v1/workspaces/${ws}/folders`, { path: 'taken/sub' })).statusCode).toBe(409);
    expect((await list(admin, ws)).map((e) => [e.type, e.path])).toEqual([['file', 'taken']]);
  });

  it('validates the body', async () => {
    const admin = await createOrgAdmin(h);
    const res = await post(admin, `/v1/workspaces/${admin.personalWorkspaceId}/folders`, {});
    expect(res.statusCode).toBe(400);
    expect(json(res).error.code).toBe('invalid_request');
    expect(json(res).error.message).toContain('path');
  });
});

// ---- move -------------------------------------------------------------------------------------

describe('move', () => {
  const move = (actor: Actor, ws: string, body: Record<string, unknown>) => post(actor, `/v1/workspaces/${ws}/move`, body);

  it('renames a file: the old path is gone, the bytes are at the new one', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    const original = await upload(admin, ws, 'draft.txt', 'contents', 'text/plain');
    const res = await move(admin, ws, { from: 'draft.txt', to: 'final/report.txt' });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).data).toMatchObject({
      id: original.id,
      name: 'report.txt',
      path: 'final/report.txt',
      type: 'file',
      size: 8,
      mimeType: 'text/plain',
    });

    expect((await get(admin, ws, 'draft.txt')).statusCode).toBe(404);
    expect((await get(admin, ws, 'final/report.txt')).body).toBe('contents');
    expect((await list(admin, ws)).map((e) => e.path)).toEqual(['final']);
    expect(await usedBytes(admin)).toBe(8);
  });

  it('moves a folder with everything in it', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    await upload(admin, ws, 'src/index.ts', 'export {}');
    await upload(admin, ws, 'src/lib/util.ts', 'export const x = 1;');
    await upload(admin, ws, 'src/lib/deep/data.json', '[]');
    await upload(admin, ws, 'srcfile.txt', 'not inside src');
    await upload(admin, ws, 'src-other/keep.txt', 'not inside src either');

    const res = await move(admin, ws, { from: 'src', to: 'packages/app/src' });
    expect(res.statusCode, res.body).toBe(200);
    expect(json(res).data).toMatchObject({ path: 'packages/app/src', type: 'folder' });

    expect((await list(admin, ws)).map((e) => e.path)).toEqual(['packages', 'src-other', 'srcfile.txt']);
    expect((await list(admin, ws, 'packages/app/src')).map((e) => e.path)).toEqual(['packages/app/src/lib', 'packages/app/src/index.ts']);
    expect((await list(admin, ws, 'packages/app/src/lib')).map((e) => e.path)).toEqual(['packages/app/src/lib/deep', 'packages/app/src/lib/util.ts']);
    expect((await get(admin, ws, 'packages/app/src/lib/deep/data.json')).body).toBe('[]');
    expect((await get(admin, ws, 'packages/app/src/lib/util.ts')).body).toBe('export const x = 1;');
    expect((await get(admin, ws, 'src/index.ts')).statusCode).toBe(404);
    expect((await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/files?path=src/lib`, headers: admin.headers })).statusCode).toBe(404);
    expect((await get(admin, ws, 'src-other/keep.txt')).body).toBe('not inside src either');
  });

  it('moves a folder whose name has characters outside the BMP with its contents', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    await upload(admin, ws, '📁 photos/🐱.txt', 'cat');
    await upload(admin, ws, '📁 photos/sub/🐶.txt', 'dog');

    const res = await move(admin, ws, { from: '📁 photos', to: 'pets' });
    expect(res.statusCode, res.body).toBe(200);
    expect((await list(admin, ws)).map((e) => e.path)).toEqual(['pets']);
    expect((await list(admin, ws, 'pets')).map((e) => e.path)).toEqual(['pets/sub', 'pets/🐱.txt']);
    expect((await get(admin, ws, 'pets/sub/🐶.txt')).body).toBe('dog');

    const gone = await del(admin, ws, 'pets', '?recursive=true');
    expect(json(gone).data).toMatchObject({ entries: 4, bytes: 6 });
    expect(await list(admin, ws)).toEqual([]);
    expect(await usedBytes(admin)).toBe(0);
  });

  it('an existing target is 409, unless overwrite is true and both are files', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    await upload(admin, ws, 'a.txt', 'AAAA');
    await upload(admin, ws, 'b.txt', 'BB');
    await upload(admin, ws, 'dir1/x.txt', 'x');
    await upload(admin, ws, 'dir2/y.txt', 'y');
    expect(await usedBytes(admin)).toBe(8);

    const clash = await move(admin, ws, { from: 'a.txt', to: 'b.txt' });
    expect(clash.statusCode).toBe(409);
    expect(json(clash).error.code).toBe('conflict');
    expect(json(clash).error.message).toContain('overwrite');
    expect((await get(admin, ws, 'b.txt')).body).toBe('BB');

    expect((await move(admin, ws, { from: 'a.txt', to: 'dir1', overwrite: true })).statusCode).toBe(409);
    expect((await move(admin, ws, { from: 'dir1', to: 'dir2', overwrite: true })).statusCode).toBe(409);
    expect((await move(admin, ws, { from: 'dir1', to: 'b.txt', overwrite: true })).statusCode).toBe(409);

    const replaced = await move(admin, ws, { from: 'a.txt', to: 'b.txt', overwrite: true });
    expect(replaced.statusCode).toBe(200);
    expect((await get(admin, ws, 'b.txt')).body).toBe('AAAA');
    expect((await get(admin, ws, 'a.txt')).statusCode).toBe(404);
    expect(await usedBytes(admin)).toBe(6);
    expect((await list(admin, ws)).map((e) => e.path)).toEqual(['dir1', 'dir2', 'b.txt']);
  });

  it('moving a folder into itself or onto itself is 400; a missing source is 404; under a file is 409', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    await upload(admin, ws, 'box/item.txt', 'i');
    await upload(admin, ws, 'plain.txt', 'p');

    const into = await move(admin, ws, { from: 'box', to: 'box/inner' });
    expect(into.statusCode).toBe(400);
    expect(json(into).error.message).toMatch(/^to: /);
    const same = await move(admin, ws, { from: 'box', to: 'box/' });
    expect(same.statusCode).toBe(400);
    expect(json(same).error.message).toMatch(/^to: /);

    const missing = await move(admin, ws, { from: 'nope', to: 'elsewhere' });
    expect(missing.statusCode).toBe(404);
    expect(json(missing).error.code).toBe('not_found');

    expect((await move(admin, ws, { from: 'box', to: 'plain.txt/box' })).statusCode).toBe(409);
    expect((await move(admin, ws, { from: 'box' })).statusCode).toBe(400);
    expect((await list(admin, ws)).map((e) => e.path)).toEqual(['box', 'plain.txt']);
    expect((await list(admin, ws, 'box')).map((e) => e.path)).toEqual(['box/item.txt']);
  });
});

// ---- delete -----------------------------------------------------------------------------------

describe('delete', () => {
  it('deletes a file and gives its bytes back to the meter', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    await upload(admin, ws, 'docs/a.txt', '12345');
    await upload(admin, ws, 'docs/b.txt', '678');
    expect(await usedBytes(admin)).toBe(8);

    const res = await del(admin, ws, 'docs/a.txt');
    expect(res.statusCode).toBe(200);
    expect(json(res).data).toEqual({ deleted: true, path: 'docs/a.txt', entries: 1, bytes: 5 });
    expect((await get(admin, ws, 'docs/a.txt')).statusCode).toBe(404);
    expect((await list(admin, ws, 'docs')).map((e) => e.path)).toEqual(['docs/b.txt']);
    expect(await usedBytes(admin)).toBe(3);

    const again = await del(admin, ws, 'docs/a.txt');
    expect(again.statusCode).toBe(404);
    expect(json(again).error.code).toBe('not_found');
  });

  it('a folder with contents needs recursive=true; then everything in it is gone', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    await upload(admin, ws, 'tree/one.txt', 'one');
    await upload(admin, ws, 'tree/sub/two.txt', 'two!');
    await upload(admin, ws, 'treehouse.txt', 'stays');
    expect(await usedBytes(admin)).toBe(12);

    const refused = await del(admin, ws, 'tree');
    expect(refused.statusCode).toBe(409);
    expect(json(refused).error.code).toBe('conflict');
    expect(json(refused).error.message).toContain('recursive=true');
    expect((await list(admin, ws, 'tree')).map((e) => e.path)).toEqual(['tree/sub', 'tree/one.txt']);
    expect((await del(admin, ws, 'tree', '?recursive=false')).statusCode).toBe(409);
    expect((await del(admin, ws, 'tree', '?recursive=maybe')).statusCode).toBe(400);

    const res = await del(admin, ws, 'tree', '?recursive=true');
    expect(res.statusCode).toBe(200);
    expect(json(res).data).toEqual({ deleted: true, path: 'tree', entries: 4, bytes: 7 });
    expect((await list(admin, ws)).map((e) => e.path)).toEqual(['treehouse.txt']);
    expect((await get(admin, ws, 'tree/sub/two.txt')).statusCode).toBe(404);
    expect(await usedBytes(admin)).toBe(5);

    // The name is free again.
    expect((await put(admin, ws, 'tree/one.txt', 'new')).statusCode).toBe(201);
  });

  it('an empty folder is deleted without recursive', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    await post(admin, `/v1/workspaces/${ws}/folders`, { path: 'empty' });
    const res = await del(admin, ws, 'empty');
    expect(res.statusCode).toBe(200);
    expect(json(res).data).toEqual({ deleted: true, path: 'empty', entries: 1, bytes: 0 });
    expect(await list(admin, ws)).toEqual([]);
  });
});

// ---- storage usage ----------------------------------------------------------------------------

describe('storage usage', () => {
  it('counts every workspace of the organization and reports the quota', async () => {
    const admin = await createOrgAdmin(h);
    const member = await addOrgMember(h, admin);
    const usage0 = json(await h.app.inject({ method: 'GET', url: '/v1/storage/usage', headers: admin.headers })).data;
    expect(usage0).toEqual({ usedBytes: 0, quotaBytes: h.deps.config.storageQuotaBytes });

    await upload(admin, admin.personalWorkspaceId, 'a', Buffer.alloc(100));
    await upload(member, member.personalWorkspaceId, 'b', Buffer.alloc(20));
    await upload(member, await projectWorkspaceId(admin), 'c', Buffer.alloc(3));
    expect(await usedBytes(admin)).toBe(123);
    expect(await usedBytes(member)).toBe(123);
    // Another organization's meter is its own.
    expect(await usedBytes(await createOrgAdmin(h))).toBe(0);
  });
});

// ---- activity ---------------------------------------------------------------------------------

describe('activity', () => {
  it('uploads, folders, moves and deletes appear in the workspace’s activity and in /v1/activity?workspace_id=', async () => {
    const admin = await createOrgAdmin(h);
    const member = await addOrgMember(h, admin);
    const ws = await projectWorkspaceId(admin);

    await upload(admin, ws, 'log/a.txt', 'a');
    await upload(admin, ws, 'log/a.txt', 'aa');
    await post(admin, `/v1/workspaces/${ws}/folders`, { path: 'made' });
    expect((await post(admin, `/v1/workspaces/${ws}/move`, { from: 'log/a.txt', to: 'made/b.txt' })).statusCode).toBe(200);
    expect((await del(admin, ws, 'made/b.txt')).statusCode).toBe(200);
    expect((await del(admin, ws, 'log')).statusCode).toBe(200);
    await upload(member, ws, 'by-member.txt', 'm');
    // Another workspace's events stay out.
    await upload(admin, admin.personalWorkspaceId, 'private.txt', 'p');

    const expected = [
      { eventType: 'workspace.file.added', status: 'added', title: 'Added by-member.txt', actorUserId: member.userId },
      { eventType: 'workspace.folder.deleted', status: 'deleted', metadata: { path: 'log', entries: 1, bytes: 0 } },
      { eventType: 'workspace.file.deleted', status: 'deleted', metadata: { path: 'made/b.txt', entries: 1, bytes: 2 } },
      { eventType: 'workspace.file.moved', status: 'moved', metadata: { from: 'log/a.txt', to: 'made/b.txt', entries: 1 } },
      { eventType: 'workspace.folder.created', status: 'added', metadata: { path: 'made' } },
      { eventType: 'workspace.file.updated', status: 'updated', metadata: { path: 'log/a.txt', size: 2 } },
      { eventType: 'workspace.file.added', status: 'added', metadata: { path: 'log/a.txt', size: 1 }, actorUserId: admin.userId },
    ].map((e) => ({ resourceType: 'workspace', resourceId: ws, workspaceId: ws, severity: 'info', ...e }));

    const own = await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/activity`, headers: admin.headers });
    expect(own.statusCode).toBe(200);
    expect(json(own).data.events).toMatchObject(expected);
    expect(json(own).meta).toMatchObject({ hasMore: false, nextCursor: null });

    // A member who can access the workspace sees everyone's events there.
    const asMember = json(await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/activity`, headers: member.headers })).data.events;
    expect(asMember).toMatchObject(expected);

    const filtered = await h.app.inject({ method: 'GET', url: `/v1/activity?workspace_id=${ws}`, headers: admin.headers });
    expect(filtered.statusCode).toBe(200);
    expect(json(filtered).data.events).toMatchObject(expected);

    const byType = json(
      await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/activity?event_type=workspace.file.moved`, headers: admin.headers }),
    ).data.events;
    expect(byType).toHaveLength(1);
    await expectActivity(h, admin, {
      eventType: 'workspace.file.moved',
      resourceType: 'workspace',
      resourceId: ws,
      metadata: { from: 'log/a.txt', to: 'made/b.txt' },
    });

    const paged = json(await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/activity?limit=2`, headers: admin.headers }));
    expect(paged.data.events).toHaveLength(2);
    expect(paged.meta.hasMore).toBe(true);
  });

  it('a failed write records nothing', async () => {
    const admin = await createOrgAdmin(h);
    const ws = admin.personalWorkspaceId;
    await upload(admin, ws, 'f', 'x');
    expect((await put(admin, ws, 'f/child', 'x')).statusCode).toBe(409);
    expect((await post(admin, `/v1/workspaces/${ws}/move`, { from: 'nope', to: 'x' })).statusCode).toBe(404);
    expect((await del(admin, ws, 'nope')).statusCode).toBe(404);
    const events = json(await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/activity`, headers: admin.headers })).data.events;
    expect(events.map((e: { eventType: string }) => e.eventType)).toEqual(['workspace.file.added']);
  });
});
