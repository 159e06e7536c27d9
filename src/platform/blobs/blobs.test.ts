import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { text } from 'node:stream/consumers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BlobTooLargeError, LocalBlobStore } from './index.js';

/** Every file under `dir`, relative, so a test can tell what a failed write left behind. */
function filesUnder(dir: string): string[] {
  try {
    return readdirSync(dir, { recursive: true, withFileTypes: true })
      .filter((d) => d.isFile())
      .map((d) => path.relative(dir, path.join(d.parentPath, d.name)))
      .sort();
  } catch {
    return [];
  }
}

async function bytes(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks);
}

const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

describe('LocalBlobStore', () => {
  let root: string;
  let store: LocalBlobStore;

  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), 'hangar-blobs-'));
    store = new LocalBlobStore(root);
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('puts a Buffer, a string and a stream, reporting size and sha256, and reads them back', async () => {
    const buf = randomBytes(4096);
    expect(await store.put('put/buffer.bin', buf)).toEqual({ size: 4096, sha256: sha256(buf) });
    expect(await bytes(await store.get('put/buffer.bin'))).toEqual(buf);

    expect(await store.put('put/text.txt', 'héllo')).toEqual({ size: Buffer.byteLength('héllo'), sha256: sha256('héllo') });
    expect(await text(await store.get('put/text.txt'))).toBe('héllo');

    const parts = [randomBytes(1000), randomBytes(1), randomBytes(70_000)];
    const whole = Buffer.concat(parts);
    expect(await store.put('put/nested/deep/stream.bin', Readable.from(parts))).toEqual({ size: whole.length, sha256: sha256(whole) });
    expect(await bytes(await store.get('put/nested/deep/stream.bin'))).toEqual(whole);
    expect(await store.size('put/nested/deep/stream.bin')).toBe(whole.length);
  });

  it('puts an empty blob', async () => {
    expect(await store.put('put/empty', Buffer.alloc(0))).toEqual({ size: 0, sha256: sha256('') });
    expect(await store.size('put/empty')).toBe(0);
    expect((await bytes(await store.get('put/empty'))).length).toBe(0);
  });

  it('replaces a blob atomically and leaves no temporary file', async () => {
    await store.put('atomic/a', 'first version');
    await store.put('atomic/a', 'second');
    expect(await text(await store.get('atomic/a'))).toBe('second');
    expect(filesUnder(path.join(root, 'atomic'))).toEqual(['a']);
  });

  it('refuses a stream over maxBytes with BlobTooLargeError, keeping the previous blob and leaving nothing else', async () => {
    await store.put('limit/kept', 'old bytes');
    const err = await store.put('limit/kept', Readable.from([Buffer.alloc(6), Buffer.alloc(6)]), { maxBytes: 10 }).catch((e) => e);
    expect(err).toBeInstanceOf(BlobTooLargeError);
    expect(err.limit).toBe(10);
    expect(await text(await store.get('limit/kept'))).toBe('old bytes');

    // A too-large first chunk fails before the temporary file is even open: it must still be removed.
    for (let i = 0; i < 20; i++) {
      await expect(store.put(`limit/new-${i}`, Buffer.alloc(11), { maxBytes: 10 })).rejects.toBeInstanceOf(BlobTooLargeError);
    }
    const many = Array.from({ length: 50 }, (_, i) => store.put(`limit/many-${i}`, Buffer.alloc(11), { maxBytes: 10 }));
    for (const result of await Promise.allSettled(many)) {
      expect(result.status === 'rejected' && result.reason).toBeInstanceOf(BlobTooLargeError);
    }
    expect(await store.put('limit/exact', Buffer.alloc(10), { maxBytes: 10 })).toMatchObject({ size: 10 });
    expect(filesUnder(path.join(root, 'limit'))).toEqual(['exact', 'kept']);
    expect(await store.size('limit/new-0')).toBeNull();
  });

  it('removes the partial file when the source stream fails', async () => {
    let sent = 0;
    const failing = new Readable({
      read() {
        if (sent++ < 3) this.push(Buffer.alloc(1024, 1));
        else this.destroy(new Error('client went away'));
      },
    });
    await expect(store.put('broken/file', failing)).rejects.toThrow('client went away');
    expect(await store.size('broken/file')).toBeNull();
    expect(filesUnder(path.join(root, 'broken'))).toEqual([]);
  });

  it('reads an inclusive byte range', async () => {
    await store.put('range/r', '0123456789');
    expect(await text(await store.get('range/r', { start: 0, end: 4 }))).toBe('01234');
    expect(await text(await store.get('range/r', { start: 7, end: 9 }))).toBe('789');
    expect(await text(await store.get('range/r', { start: 5, end: 5 }))).toBe('5');
  });

  it('appends, creating the blob on first use', async () => {
    await store.append('logs/run.jsonl', '{"a":1}\n');
    await store.append('logs/run.jsonl', Buffer.from('{"b":2}\n'));
    expect(readFileSync(path.join(root, 'logs/run.jsonl'), 'utf8')).toBe('{"a":1}\n{"b":2}\n');
    expect(await store.size('logs/run.jsonl')).toBe(16);
  });

  it('reports a missing blob: get rejects with ENOENT, size is null, delete is a no-op', async () => {
    await expect(store.get('missing/x')).rejects.toMatchObject({ code: 'ENOENT' });
    expect(await store.size('missing/x')).toBeNull();
    await expect(store.delete('missing/x')).resolves.toBeUndefined();

    await store.put('gone/x', 'bye');
    await store.delete('gone/x');
    expect(await store.size('gone/x')).toBeNull();
  });

  it('rejects keys that could leave the root', async () => {
    for (const key of ['../escape', 'a/../../escape', '/etc/passwd', 'a//b', './a', 'a/./b', '', '.hidden', 'a\\b', 'a b']) {
      await expect(store.put(key, 'x'), key).rejects.toThrow(/unsafe blob key/);
      await expect(store.get(key), key).rejects.toThrow(/unsafe blob key/);
    }
    expect(existsSync(path.join(root, '..', 'escape'))).toBe(false);
    expect(filesUnder(root).some((f) => f.includes('escape'))).toBe(false);
  });
});
