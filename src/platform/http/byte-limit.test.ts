import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import { ByteLimit, refuseDeclaredLength } from './byte-limit.js';
import { AppError } from './errors.js';

async function drain(chunks: Buffer[], limiter: ByteLimit): Promise<Buffer> {
  const out: Buffer[] = [];
  await pipeline(Readable.from(chunks), limiter, async (source: AsyncIterable<Buffer>) => {
    for await (const c of source) out.push(c);
  });
  return Buffer.concat(out);
}

describe('ByteLimit', () => {
  it('passes a body of exactly the limit through unchanged', async () => {
    const limiter = new ByteLimit(10);
    const body = await drain([Buffer.from('hello'), Buffer.from('world')], limiter);
    expect(body.toString()).toBe('helloworld');
    expect(limiter.bytes).toBe(10);
    expect(limiter.exceeded).toBe(false);
  });

  it('fails one byte past the limit with 413 payload_too_large and passes nothing of the chunk that crossed it', async () => {
    const limiter = new ByteLimit(10);
    const out: Buffer[] = [];
    const err = await pipeline(Readable.from([Buffer.alloc(6, 1), Buffer.alloc(5, 2)]), limiter, async (source: AsyncIterable<Buffer>) => {
      for await (const c of source) out.push(c);
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).code).toBe('payload_too_large');
    expect(limiter.exceeded).toBe(true);
    // The consumer may stop before the first chunk arrives; what it got never includes the crossing chunk.
    expect(Buffer.concat(out).includes(2)).toBe(false);
  });

  it('fails with the caller’s own error when given one', async () => {
    class Mine extends Error {}
    const err = await drain([Buffer.alloc(3)], new ByteLimit(2, () => new Mine('too big'))).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Mine);
  });
});

describe('refuseDeclaredLength', () => {
  it('refuses a declared length over the limit with 413 and accepts one at it or none', () => {
    expect(() => refuseDeclaredLength(11, 10, 'too large')).toThrow(expect.objectContaining({ code: 'payload_too_large', message: 'too large' }));
    expect(() => refuseDeclaredLength(10, 10, 'too large')).not.toThrow();
    expect(() => refuseDeclaredLength(undefined, 10, 'too large')).not.toThrow();
  });
});
