import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream, statSync } from 'node:fs';
import { mkdir, open, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ByteLimit } from '../http/byte-limit.js';

export interface PutResult {
  size: number;
  sha256: string;
}

/** Raised when a stream passes the byte limit given to put(). */
export class BlobTooLargeError extends Error {
  constructor(readonly limit: number) {
    super(`blob exceeds ${limit} bytes`);
  }
}

/** Where file bytes live: local disk now, S3-compatible stores later. Writes are atomic. */
export interface BlobStore {
  /**
   * Writes all of `source` under `key`; readers see the whole blob or none of it. A failed put destroys a
   * stream source; pass `stream.iterator({ destroyOnReturn: false })` to keep the stream for the caller.
   */
  put(key: string, source: BlobSource, opts?: { maxBytes?: number }): Promise<PutResult>;
  /** Appends to a blob, creating it (used for JSONL logs). */
  append(key: string, data: string | Buffer): Promise<void>;
  get(key: string, range?: { start: number; end: number }): Promise<Readable>;
  size(key: string): Promise<number | null>;
  /**
   * The size now, without a turn of the event loop, where the store can tell from local metadata (a local disk:
   * one `stat` the kernel answers from its cache); absent where it cannot. For hot paths that check a size before
   * every write.
   */
  sizeNow?(key: string): number | null;
  delete(key: string): Promise<void>;
}

export type BlobSource = Readable | AsyncIterable<Buffer> | Buffer | string;

const SAFE_KEY = /^[A-Za-z0-9_][A-Za-z0-9_.\-/]*$/;

export class LocalBlobStore implements BlobStore {
  constructor(private readonly root: string) {}

  private file(key: string): string {
    if (!SAFE_KEY.test(key) || key.split('/').some((p) => p === '..' || p === '' || p === '.')) {
      throw new Error(`unsafe blob key: ${key}`);
    }
    return path.join(this.root, key);
  }

  async put(key: string, source: BlobSource, opts: { maxBytes?: number } = {}): Promise<PutResult> {
    const target = this.file(key);
    await mkdir(path.dirname(target), { recursive: true });
    const tmp = `${target}.tmp-${randomBytes(6).toString('hex')}`;
    const hash = createHash('sha256');
    let size = 0;
    const limit = opts.maxBytes ?? Number.POSITIVE_INFINITY;
    const limiter = new ByteLimit(limit, () => new BlobTooLargeError(limit));
    const meter = new Transform({
      transform(chunk: Buffer, _enc, done) {
        size += chunk.length;
        hash.update(chunk);
        done(null, chunk);
      },
    });
    const input = typeof source === 'string' || Buffer.isBuffer(source) ? [source] : source;
    const out = createWriteStream(tmp, { mode: 0o600 });
    try {
      await pipeline(input as Iterable<unknown> | AsyncIterable<unknown>, limiter, meter, out);
      const fh = await open(tmp, 'r');
      try {
        await fh.sync();
      } finally {
        await fh.close();
      }
      await rename(tmp, target);
    } catch (err) {
      // pipeline can reject while the write stream is still opening the file; remove it once closed.
      if (!out.closed) await new Promise<void>((resolve) => out.once('close', () => resolve()));
      await rm(tmp, { force: true });
      throw err;
    }
    return { size, sha256: hash.digest('hex') };
  }

  async append(key: string, data: string | Buffer): Promise<void> {
    const target = this.file(key);
    await mkdir(path.dirname(target), { recursive: true });
    const fh = await open(target, 'a', 0o600);
    try {
      await fh.appendFile(data);
      await fh.datasync();
    } finally {
      await fh.close();
    }
  }

  async get(key: string, range?: { start: number; end: number }): Promise<Readable> {
    const file = this.file(key);
    await stat(file); // fail with ENOENT before the caller commits to a response
    return createReadStream(file, range ? { start: range.start, end: range.end } : undefined);
  }

  sizeNow(key: string): number | null {
    const s = statSync(this.file(key), { throwIfNoEntry: false });
    return s ? s.size : null;
  }

  async size(key: string): Promise<number | null> {
    try {
      return (await stat(this.file(key))).size;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
  }

  async delete(key: string): Promise<void> {
    await rm(this.file(key), { force: true });
  }
}
