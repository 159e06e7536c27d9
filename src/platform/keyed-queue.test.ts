import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { KeyedQueue } from './keyed-queue.js';

describe('KeyedQueue', () => {
  it('runs the tasks of one key one at a time, in order, and other keys alongside', async () => {
    const q = new KeyedQueue();
    const log: string[] = [];
    const task = (name: string, ms: number) => async () => {
      log.push(`${name} start`);
      await sleep(ms);
      log.push(`${name} end`);
      return name;
    };
    const results = await Promise.all([q.run('a', task('a1', 30)), q.run('a', task('a2', 1)), q.run('b', task('b1', 5))]);
    expect(results).toEqual(['a1', 'a2', 'b1']);
    expect(log.indexOf('a1 end')).toBeLessThan(log.indexOf('a2 start'));
    expect(log.indexOf('b1 end')).toBeLessThan(log.indexOf('a1 end'));
    expect(q.size).toBe(0);
  });

  it('a failed task rejects its caller only; the next task of its key still runs', async () => {
    const q = new KeyedQueue();
    const failed = q.run('k', async () => {
      throw new Error('boom');
    });
    const next = q.run('k', async () => 'ran');
    await expect(failed).rejects.toThrow('boom');
    await expect(next).resolves.toBe('ran');
  });

  it('drain settles once every task given so far has settled', async () => {
    const q = new KeyedQueue();
    let done = 0;
    for (const key of ['x', 'x', 'y'])
      void q.run(key, async () => {
        await sleep(10);
        done++;
      });
    await q.drain();
    expect(done).toBe(3);
    expect(q.size).toBe(0);
  });
});
