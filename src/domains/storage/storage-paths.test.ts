import { readdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppError } from '../../platform/http/errors.js';
import { createHarness, createOrgAdmin, json, type Actor, type Harness } from '../../../test/harness.js';
import { ancestorsOf, nameOf, normalizeEntryPath, normalizePath, parentOf } from './paths.js';
import { rejection } from '../../../test/helpers.js';

describe('normalizePath', () => {
  it('normalizes to a/b/c: drops empty and "." segments and trailing slashes', () => {
    expect(normalizePath('a/b/c')).toBe('a/b/c');
    expect(normalizePath('a//b/./c/')).toBe('a/b/c');
    expect(normalizePath('./docs')).toBe('docs');
    expect(normalizePath('report.final.pdf')).toBe('report.final.pdf');
    expect(normalizePath('...')).toBe('...');
    expect(normalizePath('a..b/..c')).toBe('a..b/..c');
    expect(normalizePath('with space/ünïcode 文件.txt')).toBe('with space/ünïcode 文件.txt');
  });

  it('treats "", "." and "./" as the root', () => {
    expect(normalizePath('')).toBe('');
    expect(normalizePath('.')).toBe('');
    expect(normalizePath('./')).toBe('');
  });

  it('composes to NFC so the same name typed two ways is one path', () => {
    const decomposed = 'cafe\u0301.txt';
    expect(normalizePath(decomposed)).toBe('caf\u00e9.txt');
    expect(normalizePath(decomposed)).toBe(normalizePath('caf\u00e9.txt'));
  });

  it.each([
    ['..', '".."'],
    ['../etc/passwd', '".."'],
    ['a/../../b', '".."'],
    ['a/b/..', '".."'],
    ['/etc/passwd', 'leading "/"'],
    ['/', 'leading "/"'],
    ['a\\b', '"/" as separator'],
    ['..\\..\\windows', '"/" as separator'],
    ['a\u0000b', 'NUL'],
    ['a\nb', 'control characters'],
    ['a\u007fb', 'control characters'],
    ['tab\there', 'control characters'],
  ])('rejects %j with a 400 naming the field', (input, why) => {
    const err = rejection(() => normalizePath(input, 'from'), AppError);
    expect(err.status).toBe(400);
    expect(err.code).toBe('invalid_request');
    expect(err.message).toMatch(/^from: /);
    expect(err.message).toContain(why);
    expect(err.details?.issues).toEqual([{ path: 'from', message: expect.any(String) }]);
  });

  it('names "path" when no field is given', () => {
    expect(rejection(() => normalizePath('../x'), AppError).message).toMatch(/^path: /);
  });

  it('limits a name to 255 bytes and a path to 1024 bytes (UTF-8)', () => {
    expect(normalizePath('a'.repeat(255))).toHaveLength(255);
    expect(rejection(() => normalizePath('a'.repeat(256)), AppError).message).toContain('255 bytes');
    // 128 two-byte characters are 256 bytes.
    expect(rejection(() => normalizePath('é'.repeat(128)), AppError).message).toContain('255 bytes');

    const segment = 'b'.repeat(200);
    const ok = Array(5).fill(segment).join('/'); // 1004 bytes
    expect(normalizePath(ok)).toBe(ok);
    expect(rejection(() => normalizePath(Array(6).fill(segment).join('/')), AppError).message).toContain('1024 bytes');
  });
});

describe('normalizeEntryPath and path helpers', () => {
  it('refuses the root, which names no file or folder', () => {
    expect(normalizeEntryPath('a/b')).toBe('a/b');
    for (const root of ['', '.', '/'.slice(1), './']) {
      const err = rejection(() => normalizeEntryPath(root, 'to'), AppError);
      expect(err.status).toBe(400);
      expect(err.message).toMatch(/^to: /);
    }
  });

  it('splits paths', () => {
    expect(parentOf('a/b/c.txt')).toBe('a/b');
    expect(parentOf('c.txt')).toBe('');
    expect(nameOf('a/b/c.txt')).toBe('c.txt');
    expect(nameOf('c.txt')).toBe('c.txt');
    expect(ancestorsOf('a/b/c')).toEqual(['a', 'a/b']);
    expect(ancestorsOf('a')).toEqual([]);
  });
});

describe('path rules over HTTP', () => {
  let h: Harness;
  let admin: Actor;
  let ws: string;

  beforeAll(async () => {
    h = await createHarness();
    admin = await createOrgAdmin(h);
    ws = admin.personalWorkspaceId;
    const seed = await h.app.inject({ method: 'PUT', url: `/v1/workspaces/${ws}/files/docs/keep.txt`, headers: admin.headers, payload: 'keep' });
    expect(seed.statusCode).toBe(201);
  });
  afterAll(() => h.close());

  const blobFiles = () => {
    try {
      return readdirSync(path.join(h.dataDir, 'blobs'), { recursive: true, withFileTypes: true }).filter((d) => d.isFile()).length;
    } catch {
      return 0;
    }
  };

  async function snapshot() {
    const root = json(await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/files`, headers: admin.headers })).data;
    const docs = json(await h.app.inject({ method: 'GET', url: `/v1/workspaces/${ws}/files?path=docs`, headers: admin.headers })).data;
    const usage = json(await h.app.inject({ method: 'GET', url: '/v1/storage/usage', headers: admin.headers })).data;
    return { root, docs, usage, blobs: blobFiles() };
  }

  function expectInvalid(res: { statusCode: number; body: string }, field: string) {
    expect(res.statusCode, res.body).toBe(400);
    const error = json(res).error;
    expect(error.code).toBe('invalid_request');
    expect(error.message).toMatch(new RegExp(`^${field}: `));
    expect(error.issues?.[0]?.path).toBe(field);
  }

  it('rejects bad paths in every route with 400 naming the field, and writes nothing', async () => {
    const before = await snapshot();
    const base = `/v1/workspaces/${ws}`;
    const put = (p: string) => h.app.inject({ method: 'PUT', url: `${base}/files/${p}`, headers: admin.headers, payload: 'evil' });

    // Raw upload: `..` (encoded so the URL parser does not resolve it), NUL, backslash, control characters.
    expectInvalid(await put('docs/..%2F..%2Fescape.txt'), 'path');
    expectInvalid(await put('x/..%2Fescape.txt'), 'path');
    expectInvalid(await put('evil%00.txt'), 'path');
    expectInvalid(await put('a%5Cb.txt'), 'path');
    expectInvalid(await put('line%0Abreak.txt'), 'path');
    // An absolute path: `//etc/passwd` in the URL leaves a leading "/" in the wildcard.
    expectInvalid(await put('%2Fetc%2Fpasswd'), 'path');

    // Listing, download, HEAD and delete.
    expectInvalid(await h.app.inject({ method: 'GET', url: `${base}/files?path=/etc`, headers: admin.headers }), 'path');
    expectInvalid(await h.app.inject({ method: 'GET', url: `${base}/files?path=../..`, headers: admin.headers }), 'path');
    expectInvalid(await h.app.inject({ method: 'GET', url: `${base}/files?path=a%00b`, headers: admin.headers }), 'path');
    expectInvalid(await h.app.inject({ method: 'GET', url: `${base}/files?path=a%5Cb`, headers: admin.headers }), 'path');
    expectInvalid(await h.app.inject({ method: 'GET', url: `${base}/files/docs%2F..%2F..%2Fkeep.txt`, headers: admin.headers }), 'path');
    expectInvalid(await h.app.inject({ method: 'GET', url: `${base}/files/keep%00.txt`, headers: admin.headers }), 'path');
    expect((await h.app.inject({ method: 'HEAD', url: `${base}/files/keep%00.txt`, headers: admin.headers })).statusCode).toBe(400);
    expectInvalid(await h.app.inject({ method: 'DELETE', url: `${base}/files/docs%2F..`, headers: admin.headers }), 'path');
    expectInvalid(await h.app.inject({ method: 'DELETE', url: `${base}/files/docs%5Ckeep.txt`, headers: admin.headers }), 'path');

    // JSON bodies: folders and move name their own fields.
    const folder = (p: string) => h.app.inject({ method: 'POST', url: `${base}/folders`, headers: admin.headers, payload: { path: p } });
    expectInvalid(await folder('/etc'), 'path');
    expectInvalid(await folder('a/../../b'), 'path');
    expectInvalid(await folder('a\u0000b'), 'path');
    expectInvalid(await folder('a\\b'), 'path');
    expectInvalid(await folder('.'), 'path');

    const move = (from: string, to: string) => h.app.inject({ method: 'POST', url: `${base}/move`, headers: admin.headers, payload: { from, to } });
    expectInvalid(await move('docs/keep.txt', '/etc/passwd'), 'to');
    expectInvalid(await move('docs/keep.txt', '../keep.txt'), 'to');
    expectInvalid(await move('docs/keep.txt', 'a\u0000b'), 'to');
    expectInvalid(await move('docs/keep.txt', 'a\\b'), 'to');
    expectInvalid(await move('/docs/keep.txt', 'b'), 'from');
    expectInvalid(await move('docs/../docs/keep.txt', 'b'), 'from');

    // Multipart: the folder field and the file name.
    const boundary = 'pathrules';
    const form = (fields: string) =>
      h.app.inject({
        method: 'POST',
        url: `${base}/files`,
        headers: { ...admin.headers, 'content-type': `multipart/form-data; boundary=${boundary}` },
        payload: `${fields}--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="evil.txt"\r\n\r\nevil\r\n--${boundary}--\r\n`,
      });
    expectInvalid(await form(`--${boundary}\r\nContent-Disposition: form-data; name="path"\r\n\r\n/etc\r\n`), 'path');
    expectInvalid(await form(`--${boundary}\r\nContent-Disposition: form-data; name="path"\r\n\r\n../..\r\n`), 'path');

    expect(await snapshot()).toEqual(before);
  });

  it('an upload naming the workspace root itself is a 400', async () => {
    expectInvalid(await h.app.inject({ method: 'PUT', url: `/v1/workspaces/${ws}/files/%2E%2F`, headers: admin.headers, payload: 'x' }), 'path');
  });

  it('stores a name typed in decomposed form under its composed form', async () => {
    const res = await h.app.inject({
      method: 'PUT',
      url: `/v1/workspaces/${ws}/files/${encodeURIComponent('cafe\u0301.txt')}`,
      headers: admin.headers,
      payload: 'crème',
    });
    expect(res.statusCode).toBe(201);
    expect(json(res).data.path).toBe('caf\u00e9.txt');
    const dl = await h.app.inject({
      method: 'GET',
      url: `/v1/workspaces/${ws}/files/${encodeURIComponent('caf\u00e9.txt')}`,
      headers: admin.headers,
    });
    expect(dl.statusCode).toBe(200);
    expect(dl.body).toBe('crème');
  });
});
