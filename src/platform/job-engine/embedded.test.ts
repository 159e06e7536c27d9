import { afterEach, describe, expect, it } from 'vitest';
import pino from 'pino';
import { until } from '../../../test/helpers.js';
import { openDb, type Db } from '../db/index.js';
import { migrateToLatest } from '../db/migrate.js';
import { cronProblem } from './cron.js';
import { embeddedEngine } from './embedded.js';
import { withSchedules } from './index.js';
import type { Job } from './types.js';

const log = pino({ level: 'silent' });
const dbs: Db[] = [];
const engines: { stop(): Promise<void> }[] = [];

async function freshDb(): Promise<Db> {
  const db = await openDb({ kind: 'sqlite', file: ':memory:' });
  await migrateToLatest(db.kysely, db.dialect);
  dbs.push(db);
  return db;
}

function engineOn(db: Db) {
  const e = withSchedules(embeddedEngine(db.kysely, log, { pollMs: 20 }), db.kysely, log);
  engines.push(e);
  return e;
}

afterEach(async () => {
  for (const e of engines.splice(0)) await e.stop().catch(() => undefined);
  for (const d of dbs.splice(0)) await d.close();
});

describe('embedded job engine', () => {
  it('runs a job once and records it completed', async () => {
    const e = engineOn(await freshDb());
    const seen: Job<{ n: number }>[] = [];
    await e.work<{ n: number }>('q', async (job) => {
      seen.push(job);
    });
    await e.start();
    const id = (await e.send('q', { n: 1 }))!;
    await until('the job ran', async () => (await e.getJob(id))?.state === 'completed');
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ id, queue: 'q', data: { n: 1 }, attempt: 1 });
    expect(await e.getJob(id)).toMatchObject({ state: 'completed', attempts: 1, lastError: null });
  });

  it('retries a failing job with backoff, then fails it after its retry limit', async () => {
    const e = engineOn(await freshDb());
    const attempts: number[] = [];
    const at: number[] = [];
    await e.work(
      'flaky',
      async (job) => {
        attempts.push(job.attempt);
        at.push(Date.now());
        throw new Error(`boom ${job.attempt}`);
      },
      { retryLimit: 2, retryDelayMs: 50 },
    );
    await e.start();
    const id = (await e.send('flaky', {}))!;
    await until('the job failed', async () => (await e.getJob(id))?.state === 'failed', 5000);
    expect(attempts).toEqual([1, 2, 3]);
    expect(await e.getJob(id)).toMatchObject({ state: 'failed', attempts: 3, lastError: 'boom 3' });
    // Backoff: the second retry waited longer than the first one's lower bound.
    expect(at[1]! - at[0]!).toBeGreaterThanOrEqual(25);
    expect(at[2]! - at[1]!).toBeGreaterThanOrEqual(50);
  });

  it('a job that succeeds on a retry is completed', async () => {
    const e = engineOn(await freshDb());
    await e.work(
      'second-time',
      async (job) => {
        if (job.attempt === 1) throw new Error('not yet');
      },
      { retryDelayMs: 10 },
    );
    await e.start();
    const id = (await e.send('second-time', {}))!;
    await until('completed', async () => (await e.getJob(id))?.state === 'completed');
    expect(await e.getJob(id)).toMatchObject({ attempts: 2, lastError: 'not yet' });
  });

  it('creates one job per idempotency key however often it is sent', async () => {
    const e = engineOn(await freshDb());
    const runs: string[] = [];
    await e.work<{ v: number }>('keyed', async (job) => {
      runs.push(job.id);
    });
    const ids = await Promise.all([1, 2, 3, 4].map((v) => e.send('keyed', { v }, { key: 'order-17' })));
    expect(ids.filter(Boolean)).toHaveLength(1);
    await e.start();
    await until('ran', () => runs.length === 1);
    expect(await e.send('keyed', { v: 5 }, { key: 'order-17' })).toBeNull();
    // The same key in another queue is another job.
    expect(await e.send('other', {}, { key: 'order-17' })).not.toBeNull();
    await new Promise((r) => setTimeout(r, 100));
    expect(runs).toHaveLength(1);
  });

  it('honours delayMs and runs at most `concurrency` jobs at once', async () => {
    const e = engineOn(await freshDb());
    let now = 0;
    let peak = 0;
    const done: string[] = [];
    await e.work(
      'limited',
      async (job) => {
        peak = Math.max(peak, ++now);
        await new Promise((r) => setTimeout(r, 30));
        now--;
        done.push(job.id);
      },
      { concurrency: 2 },
    );
    await e.start();
    const sentAt = Date.now();
    const late = (await e.send('limited', {}, { delayMs: 300 }))!;
    for (let i = 0; i < 6; i++) await e.send('limited', {});
    await until('all ran', () => done.length === 7, 5000);
    expect(peak).toBe(2);
    expect(done.at(-1)).toBe(late);
    expect(Date.now() - sentAt).toBeGreaterThanOrEqual(300);
  });

  it('a job interrupted by a stop runs again at the next start, and survives the restart', async () => {
    const db = await freshDb();
    const first = embeddedEngine(db.kysely, log, { pollMs: 20 });
    let release!: () => void;
    const started = new Promise<void>((r) => {
      release = r;
    });
    await first.work('long', async (job) => {
      release();
      await new Promise((_, reject) => job.signal.addEventListener('abort', () => reject(job.signal.reason)));
    });
    await first.start();
    const id = (await first.send('long', { x: 1 }))!;
    await started;
    await first.stop(50);
    expect((await first.getJob(id))?.state).toBe('retry');
    const second = engineOn(db);
    const attempts: number[] = [];
    await second.work('long', async (job) => {
      attempts.push(job.attempt);
    });
    await second.start();
    await until('completed after restart', async () => (await second.getJob(id))?.state === 'completed');
    expect(attempts).toEqual([2]);
  });

  it('a job a crashed process left active is retried at the next start', async () => {
    const db = await freshDb();
    const e = engineOn(db);
    const id = (await e.send('crashy', {}))!;
    // As a process that claimed it and died would leave it.
    await db.kysely
      .updateTable('jobs')
      .set({ state: 'active', attempts: 1, expires_at: new Date(Date.now() + 60_000).toISOString() })
      .where('id', '=', id)
      .execute();
    const attempts: number[] = [];
    await e.work('crashy', async (job) => {
      attempts.push(job.attempt);
    });
    await e.start();
    await until('completed', async () => (await e.getJob(id))?.state === 'completed');
    expect(attempts).toEqual([2]);
  });

  it('times a job out: its signal aborts and the attempt fails', async () => {
    const e = engineOn(await freshDb());
    let aborted = false;
    await e.work(
      'slow',
      async (job) => {
        await new Promise<void>((resolve) =>
          job.signal.addEventListener('abort', () => {
            aborted = true;
            resolve();
          }),
        );
      },
      { timeoutMs: 50, retryLimit: 0 },
    );
    await e.start();
    const id = (await e.send('slow', {}))!;
    await until('failed', async () => (await e.getJob(id))?.state === 'failed');
    expect(aborted).toBe(true);
    expect((await e.getJob(id))?.lastError).toContain('timed out');
  });
});

describe('cron schedules', () => {
  it('refuses bad expressions and time zones, in words', () => {
    expect(cronProblem('*/5 * * * *')).toBeNull();
    expect(cronProblem('0 9 * * 1-5', 'Europe/Paris')).toBeNull();
    expect(cronProblem('* * *')).toContain('5 fields');
    expect(cronProblem('61 * * * *')).toContain('not a cron expression');
    expect(cronProblem('* * * * *', 'Mars/Olympus')).toContain('IANA');
    expect(cronProblem('0 0 30 2 *')).not.toBeNull();
  });

  it('sends one job per tick, however many processes tick', async () => {
    const db = await freshDb();
    const a = engineOn(db);
    const b = engineOn(db);
    await a.schedule('report', { cron: '0 * * * *', tz: 'UTC', queue: 'reports', data: { kind: 'hourly' } });
    await expect(a.schedule('bad', { cron: 'nope', queue: 'x' })).rejects.toThrow();
    // Two "replicas" look at the same moment, 2 hours after the schedule was made: one job, for the latest tick.
    const later = new Date(Date.now() + 2 * 3_600_000);
    const sent = (await Promise.all([a.tick(later), b.tick(later)])).reduce((n, x) => n + x, 0);
    expect(sent).toBe(1);
    const jobs = await db.kysely.selectFrom('jobs').selectAll().where('queue', '=', 'reports').execute();
    expect(jobs).toHaveLength(1);
    expect(JSON.parse(jobs[0]!.data)).toEqual({ kind: 'hourly' });
    const tick = new Date(later);
    tick.setUTCMinutes(0, 0, 0);
    expect(jobs[0]!.key).toBe(`sched:report:${tick.toISOString()}`);
    // Looking again at the same moment sends nothing; the next hour sends the next one.
    expect(await a.tick(later)).toBe(0);
    expect(await b.tick(new Date(later.getTime() + 3_600_000))).toBe(1);
  });

  it('a tick missed while nothing ran is sent once at the next look, not once per missed tick', async () => {
    const db = await freshDb();
    const e = engineOn(db);
    await e.schedule('minutely', { cron: '* * * * *', queue: 'm' });
    // Down for 3 hours: 180 missed ticks.
    expect(await e.tick(new Date(Date.now() + 3 * 3_600_000))).toBe(1);
    expect(await db.kysely.selectFrom('jobs').select('id').where('queue', '=', 'm').execute()).toHaveLength(1);
  });

  it('a replaced schedule keeps its last tick; an unscheduled one sends nothing', async () => {
    const db = await freshDb();
    const e = engineOn(db);
    await e.schedule('s', { cron: '* * * * *', queue: 'q1' });
    const t1 = new Date(Date.now() + 120_000);
    expect(await e.tick(t1)).toBe(1);
    await e.schedule('s', { cron: '* * * * *', queue: 'q2' });
    expect(await e.tick(t1)).toBe(0);
    expect(await e.tick(new Date(t1.getTime() + 60_000))).toBe(1);
    expect(await db.kysely.selectFrom('jobs').select('queue').where('queue', '=', 'q2').execute()).toHaveLength(1);
    await e.unschedule('s');
    expect(await e.tick(new Date(t1.getTime() + 600_000))).toBe(0);
  });

  it('runs the scheduled jobs through the queue’s handler', async () => {
    const db = await freshDb();
    const e = engineOn(db);
    const got: unknown[] = [];
    await e.work('beat', async (job) => {
      got.push(job.data);
    });
    await e.schedule('every-second', { cron: '* * * * * *', queue: 'beat', data: { hello: 'world' } });
    await e.start();
    await until('a scheduled job ran', () => got.length >= 1, 5000);
    expect(got[0]).toEqual({ hello: 'world' });
  });
});
