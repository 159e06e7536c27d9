import { describe, expect, it } from 'vitest';
import { AppError } from '../../platform/http/errors.js';
import { CancelledError, Pool } from './pool.js';

describe('execution pool', () => {
  it('runs up to `concurrency` at once, queues up to `queue`, and refuses beyond with 429', async () => {
    const pool = new Pool(2, 1);
    const a = await pool.enter();
    const b = await pool.enter();
    expect(pool.running).toBe(2);
    const c = pool.enter();
    expect(pool.queued).toBe(1);
    let err: unknown;
    try {
      pool.enter();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).status).toBe(429);
    expect((err as AppError).code).toBe('rate_limited');
    expect((err as AppError).headers).toEqual({ 'retry-after': '1' });
    expect((err as AppError).message).toMatch(/at capacity \(2 running, 1 waiting\)/);

    a.release();
    a.release(); // a second release of the same slot changes nothing
    const cSlot = await c;
    expect(pool.running).toBe(2);
    expect(pool.queued).toBe(0);
    b.release();
    cSlot.release();
    expect(pool.running).toBe(0);
  });

  it('serves the queue in order', async () => {
    const pool = new Pool(1, 10);
    const first = await pool.enter();
    const order: number[] = [];
    const waits = [1, 2, 3].map((n) => pool.enter().then((s) => (order.push(n), s)));
    first.release();
    for (const w of waits) (await w).release();
    expect(order).toEqual([1, 2, 3]);
    expect(pool.running).toBe(0);
  });

  it('a waiter whose client goes away gives its place up', async () => {
    const pool = new Pool(1, 1);
    const held = await pool.enter();
    const controller = new AbortController();
    const waiting = pool.enter(controller.signal);
    controller.abort();
    await expect(waiting).rejects.toBeInstanceOf(CancelledError);
    expect(pool.queued).toBe(0);
    const next = pool.enter();
    held.release();
    (await next).release();
    expect(pool.running).toBe(0);

    const aborted = new AbortController();
    aborted.abort();
    const full = await pool.enter();
    await expect(pool.enter(aborted.signal)).rejects.toBeInstanceOf(CancelledError);
    full.release();
  });

  it('a queue of 0 refuses as soon as every slot is busy', async () => {
    const pool = new Pool(1, 0);
    const s = await pool.enter();
    expect(() => pool.enter()).toThrow(AppError);
    s.release();
  });
});
