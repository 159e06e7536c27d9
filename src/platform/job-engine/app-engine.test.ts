import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../app.js';
import { createHarness, type Harness } from '../../../test/harness.js';
import { until } from '../../../test/helpers.js';

// The engine an app gets (deps.jobs) for its database: the embedded one on SQLite, pg-boss on PostgreSQL, each
// started by the app and running jobs and schedules the same way.
describe('the app’s job engine', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await createHarness();
  });
  afterAll(() => h?.close());

  it('is the engine of the configured database, runs jobs and keeps keys', async () => {
    expect(h.deps.jobs.kind).toBe(h.deps.db.dialect === 'postgres' ? 'pg-boss' : 'embedded');
    const got: unknown[] = [];
    await h.deps.jobs.work<{ n: number }>('test.app-engine', async (job) => {
      got.push(job.data);
    });
    const id = await h.deps.jobs.send('test.app-engine', { n: 7 }, { key: 'k1' });
    expect(id).toBeTruthy();
    expect(await h.deps.jobs.send('test.app-engine', { n: 8 }, { key: 'k1' })).toBeNull();
    await until('the job ran', async () => (await h.deps.jobs.getJob(id!))?.state === 'completed', 10_000);
    expect(got).toEqual([{ n: 7 }]);
  });

  it('fires a schedule through the queue', async () => {
    const got: unknown[] = [];
    await h.deps.jobs.work('test.app-schedule', async (job) => {
      got.push(job.data);
    });
    await h.deps.jobs.schedule('test-every-second', { cron: '* * * * * *', queue: 'test.app-schedule', data: { tick: true } });
    await until('a tick ran', () => got.length > 0, 10_000);
    expect(got[0]).toEqual({ tick: true });
    await h.deps.jobs.unschedule('test-every-second');
  });

  it('starts again for another app built on the same collaborators once the first is closed', async () => {
    const first = await buildApp(h.deps);
    await first.close();
    const second = await buildApp(h.deps);
    try {
      const got: unknown[] = [];
      await h.deps.jobs.work('test.app-again', async (job) => {
        got.push(job.data);
      });
      const id = await h.deps.jobs.send('test.app-again', { again: true });
      await until('the job ran on the second app', async () => (await h.deps.jobs.getJob(id!))?.state === 'completed', 10_000);
      expect(got).toEqual([{ again: true }]);
    } finally {
      await second.close();
    }
  });
});
