import { describe, expect, it } from 'vitest';
import { AppError } from '../../platform/http/errors.js';
import { CancelledError, Pool } from './pool.js';
import { rejection } from '../../../test/helpers.js';

const ORG = 'org_a';

describe('execution pool (one organization)', () => {
  it('runs up to `concurrency` at once, queues up to `queue`, and refuses beyond with 429', async () => {
    const pool = new Pool({ concurrency: 2, queue: 1, orgConcurrency: 2, orgQueue: 1 });
    const a = await pool.enter(ORG);
    const b = await pool.enter(ORG);
    expect(pool.running).toBe(2);
    const c = pool.enter(ORG);
    expect(pool.queued).toBe(1);
    let err: unknown;
    try {
      pool.enter(ORG);
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
    const pool = new Pool({ concurrency: 1, queue: 10, orgConcurrency: 1, orgQueue: 10 });
    const first = await pool.enter(ORG);
    const order: number[] = [];
    const waits = [1, 2, 3].map((n) =>
      pool.enter(ORG).then((s) => {
        order.push(n);
        return s;
      }),
    );
    first.release();
    for (const w of waits) (await w).release();
    expect(order).toEqual([1, 2, 3]);
    expect(pool.running).toBe(0);
  });

  it('a waiter whose client goes away gives its place up', async () => {
    const pool = new Pool({ concurrency: 1, queue: 1, orgConcurrency: 1, orgQueue: 1 });
    const held = await pool.enter(ORG);
    const controller = new AbortController();
    const waiting = pool.enter(ORG, controller.signal);
    controller.abort();
    await expect(waiting).rejects.toBeInstanceOf(CancelledError);
    expect(pool.queued).toBe(0);
    const next = pool.enter(ORG);
    held.release();
    (await next).release();
    expect(pool.running).toBe(0);

    const aborted = new AbortController();
    aborted.abort();
    const full = await pool.enter(ORG);
    await expect(pool.enter(ORG, aborted.signal)).rejects.toBeInstanceOf(CancelledError);
    full.release();
  });

  it('a queue of 0 refuses as soon as every slot is busy', async () => {
    const pool = new Pool({ concurrency: 1, queue: 0, orgConcurrency: 1, orgQueue: 0 });
    const s = await pool.enter(ORG);
    expect(() => pool.enter(ORG)).toThrow(AppError);
    s.release();
  });
});

describe('execution pool shared between organizations', () => {
  const rateLimited = (fn: () => unknown): AppError => rejection(fn, AppError);

  it('by default an organization gets half the pool and half the queue, rounded up', () => {
    expect(new Pool({ concurrency: 2, queue: 8 })).toMatchObject({ orgConcurrency: 1, orgQueue: 4 });
    expect(new Pool({ concurrency: 5, queue: 3 })).toMatchObject({ orgConcurrency: 3, orgQueue: 2 });
    expect(new Pool({ concurrency: 1, queue: 0 })).toMatchObject({ orgConcurrency: 1, orgQueue: 0 });
    // An organization's share never exceeds the whole.
    expect(new Pool({ concurrency: 2, queue: 4, orgConcurrency: 9, orgQueue: 9 })).toMatchObject({ orgConcurrency: 2, orgQueue: 4 });
  });

  it('a burst of one organization fills only its own share; another organization starts at once', async () => {
    const pool = new Pool({ concurrency: 2, queue: 8 });
    const a = Array.from({ length: 5 }, () => pool.enter('org_a'));
    expect(pool.usage('org_a')).toEqual({ running: 1, queued: 4 });
    // Over its own queue limit: 429 with Retry-After for that organization only.
    const err = rateLimited(() => pool.enter('org_a'));
    expect(err).toBeInstanceOf(AppError);
    expect(err.status).toBe(429);
    expect(err.headers).toEqual({ 'retry-after': '1' });
    expect(err.message).toMatch(/your organization's code executions are at capacity \(1 running, 4 waiting/);

    const b = await pool.enter('org_b'); // a slot is free: org_a may not take it
    expect(pool.running).toBe(2);
    const b2 = pool.enter('org_b'); // org_b at its own share now: it waits, in its own queue
    expect(pool.usage('org_b')).toEqual({ running: 1, queued: 1 });

    // org_a's first finishes: its next one starts (org_b is at its share and still running).
    (await a[0]!).release();
    const a1 = await a[1]!;
    expect(pool.usage('org_a')).toEqual({ running: 1, queued: 3 });
    b.release();
    (await b2).release();
    a1.release();
    for (const p of a.slice(2)) (await p).release();
    expect(pool.running).toBe(0);
    expect(pool.queued).toBe(0);
  });

  it('the per-organization cap holds even when slots are free', async () => {
    const pool = new Pool({ concurrency: 4, queue: 10, orgConcurrency: 1 });
    const a = await pool.enter('org_a');
    let second = false;
    const a2 = pool.enter('org_a').then((s) => {
      second = true;
      return s;
    });
    await Promise.resolve();
    expect(second).toBe(false);
    expect(pool.running).toBe(1);
    const b = await pool.enter('org_b');
    expect(pool.running).toBe(2);
    a.release();
    (await a2).release();
    expect(second).toBe(true);
    b.release();
    expect(pool.running).toBe(0);
  });

  it('serves waiting organizations round-robin, each organization in its own order', async () => {
    const pool = new Pool({ concurrency: 1, queue: 10, orgConcurrency: 1, orgQueue: 10 });
    const held = await pool.enter('org_a');
    const order: string[] = [];
    const wait = (org: string, label: string) =>
      pool.enter(org).then((s) => {
        order.push(label);
        return s;
      });
    const waits = [wait('org_a', 'a1'), wait('org_a', 'a2'), wait('org_a', 'a3'), wait('org_b', 'b1'), wait('org_c', 'c1'), wait('org_b', 'b2')];
    held.release();
    for (let i = 0; i < waits.length; i++) {
      await new Promise((r) => setImmediate(r));
      const next = order.at(-1)!;
      (await waits[['a1', 'a2', 'a3', 'b1', 'c1', 'b2'].indexOf(next)]!).release();
    }
    expect(order).toEqual(['a1', 'b1', 'c1', 'a2', 'b2', 'a3']);
    expect(pool.running).toBe(0);
  });

  it('the queue as a whole is still bounded, and a cancelled waiter leaves its organization’s queue', async () => {
    const pool = new Pool({ concurrency: 1, queue: 2, orgConcurrency: 1, orgQueue: 2 });
    const held = await pool.enter('org_a');
    const controller = new AbortController();
    const cancelled = pool.enter('org_b', controller.signal);
    const waiting = pool.enter('org_c');
    expect(rateLimited(() => pool.enter('org_d')).message).toMatch(/code execution is at capacity \(1 running, 2 waiting\)/);
    controller.abort();
    await expect(cancelled).rejects.toBeInstanceOf(CancelledError);
    expect(pool.usage('org_b')).toEqual({ running: 0, queued: 0 });
    held.release();
    (await waiting).release();
    expect(pool.running).toBe(0);
  });
});
