import { randomBytes } from 'node:crypto';
import pg from 'pg';
import PgBoss from 'pg-boss';
import pino from 'pino';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { until } from '../../../test/helpers.js';
import { testDatabaseUrl } from '../../../test/harness.js';
import { describeNeeding, onCi, postgresNeed, type Need } from '../../../test/needs.js';
import { keyedJobId, pgBossEngine, type PgBossEngine } from './pgboss.js';
import type { Job } from './types.js';

// The pg-boss engine against a real PostgreSQL, each test in a fresh schema of its own (dropped after); two
// engines on one schema are two replicas. Runs where HANGAR_TEST_DATABASE_URL names a server; on CI it always
// runs (without the variable, against the local server, as the other replica suites do) and an unreachable
// server fails the suite instead of skipping it.

const PG_URL = testDatabaseUrl ?? (onCi ? 'postgres://postgres@127.0.0.1:5432/test' : undefined);
const need: Need = PG_URL
  ? await postgresNeed(PG_URL, `PostgreSQL (${PG_URL}) for pg-boss`)
  : {
      what: 'PostgreSQL for pg-boss (HANGAR_TEST_DATABASE_URL)',
      present: false,
      reason: 'HANGAR_TEST_DATABASE_URL is not set',
      fix: 'start PostgreSQL on 127.0.0.1 (scripts/setup.sh) and set HANGAR_TEST_DATABASE_URL, as .ci/run does',
    };

const log = pino({ level: 'silent' });
const T = 40_000;

describeNeeding(need, 'job engine on pg-boss', () => {
  let schema: string;
  let engines: PgBossEngine[];
  let raw: PgBoss[];

  beforeEach(() => {
    schema = `t_pgboss_${randomBytes(5).toString('hex')}`;
    engines = [];
    raw = [];
  });

  afterEach(async () => {
    await Promise.all(engines.map((e) => e.stop(0)));
    await Promise.all(raw.map((b) => b.stop({ graceful: false }).catch(() => {})));
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).finally(() => client.end());
  });

  async function engine(maintenanceIntervalSeconds = 30): Promise<PgBossEngine> {
    const e = pgBossEngine({ connectionString: PG_URL!, schema, log, maintenanceIntervalSeconds });
    engines.push(e);
    await e.start();
    return e;
  }

  it(
    'runs a job once and shows it completed',
    async () => {
      const e = await engine();
      const seen: Job<{ n: number }>[] = [];
      await e.work<{ n: number }>('mail', async (job) => {
        seen.push(job);
      });
      const id = await e.send('mail', { n: 1 });
      expect(id).toBeTruthy();
      await until('the job to complete', async () => (await e.getJob(id!))?.state === 'completed');
      expect(seen.map((j) => [j.id, j.queue, j.data, j.attempt, j.signal.aborted])).toEqual([[id, 'mail', { n: 1 }, 1, false]]);
      expect(await e.getJob(id!)).toEqual({ id, queue: 'mail', state: 'completed', data: { n: 1 }, attempts: 1, lastError: null });
      // Data that is not an object survives the trip too.
      const list = await e.send('mail', [1, 'two']);
      expect((await e.getJob(list!))?.data).toEqual([1, 'two']);
      expect(await e.getJob('not-a-job')).toBeNull();
      expect(await e.getJob('00000000-0000-4000-8000-000000000000')).toBeNull();
    },
    T,
  );

  it(
    'retries a failing job with backoff, then fails it after its retry limit',
    async () => {
      const e = await engine();
      const tries: { attempt: number; at: number }[] = [];
      await e.work(
        'flaky',
        async (job) => {
          tries.push({ attempt: job.attempt, at: Date.now() });
          throw new Error(`boom ${job.attempt}`);
        },
        { retryLimit: 2, retryDelayMs: 1000, backoff: true },
      );
      const id = (await e.send('flaky', { x: 1 }))!;
      const retrying = await until('the first retry to be pending', async () => {
        const j = await e.getJob(id);
        return j?.state === 'retry' && j;
      });
      expect(retrying).toMatchObject({ state: 'retry', attempts: 1, lastError: 'boom 1' });
      const failed = await until(
        'the job to fail',
        async () => {
          const j = await e.getJob(id);
          return j?.state === 'failed' && j;
        },
        20_000,
      );
      expect(failed).toMatchObject({ state: 'failed', attempts: 3, lastError: 'boom 3' });
      expect(tries.map((t) => t.attempt)).toEqual([1, 2, 3]);
      // The first retry waits at least the delay; the second at least twice that (backoff).
      expect(tries[1].at - tries[0].at).toBeGreaterThanOrEqual(900);
      expect(tries[2].at - tries[1].at).toBeGreaterThanOrEqual(1900);
    },
    T,
  );

  it(
    'creates one job per key, however often and from however many replicas it is sent, and keeps the key after the job ran',
    async () => {
      const [a, b] = [await engine(), await engine()];
      const first = await a.send('sync', { v: 1 }, { key: 'org-1' });
      expect(first).toBe(keyedJobId('sync', 'org-1'));
      expect(await a.send('sync', { v: 2 }, { key: 'org-1' })).toBeNull();
      expect(await b.send('sync', { v: 3 }, { key: 'org-1' })).toBeNull();
      expect((await b.getJob(first!))?.data).toEqual({ v: 1 });

      // Twenty sends of a new key at once, half from each replica: one job.
      const ids = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).send('sync', { i }, { key: 'org-2' })));
      expect(ids.filter(Boolean)).toHaveLength(1);
      // The same key on another queue is another job.
      expect(await a.send('other', {}, { key: 'org-2' })).toBeTruthy();

      // Run the job: the key still answers null afterwards.
      const runs: string[] = [];
      await b.work('sync', async (job) => {
        runs.push(job.id);
      });
      await until('both keyed jobs to complete', async () => {
        const states = await Promise.all([first!, ids.find(Boolean)!].map(async (id) => (await a.getJob(id))?.state));
        return states.every((s) => s === 'completed');
      });
      expect(await a.send('sync', { v: 4 }, { key: 'org-1' })).toBeNull();
      expect(runs.sort()).toEqual([first!, ids.find(Boolean)!].sort());
    },
    T,
  );

  it(
    'runs each job on exactly one of two replicas working the same queue',
    async () => {
      const [a, b] = [await engine(), await engine()];
      const runs = new Map<string, number>();
      const byReplica = { a: 0, b: 0 };
      const handler = (who: 'a' | 'b') => async (job: Job) => {
        runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
        byReplica[who]++;
        await new Promise((r) => setTimeout(r, 5));
      };
      await a.work('fanout', handler('a'), { concurrency: 3 });
      await b.work('fanout', handler('b'), { concurrency: 3 });
      const ids = await Promise.all(Array.from({ length: 50 }, (_, i) => (i % 2 ? a : b).send('fanout', { i })));
      await until(
        'all 50 jobs to complete',
        async () => {
          const states = await Promise.all(ids.map(async (id) => (await a.getJob(id!))?.state));
          return states.every((s) => s === 'completed');
        },
        30_000,
      );
      expect(runs.size).toBe(50);
      expect([...runs.values()].every((n) => n === 1)).toBe(true);
      expect(byReplica.a + byReplica.b).toBe(50);
    },
    T,
  );

  it(
    'retries a job left active by a process that died once it expires',
    async () => {
      const e = await engine(1);
      const attempts: number[] = [];
      await e.work(
        'crashy',
        async (job) => {
          attempts.push(job.attempt);
        },
        { timeoutMs: 1000, retryDelayMs: 0, backoff: false },
      );
      // Due in an hour, so this engine leaves it alone; a bare pg-boss takes it now and dies without a word.
      const id = (await e.send('crashy', { n: 1 }, { delayMs: 3_600_000 }))!;
      const dead = new PgBoss({ connectionString: PG_URL!, schema, supervise: false, schedule: false });
      dead.on('error', () => {});
      raw.push(dead);
      await dead.start();
      const taken = await dead.fetch('crashy', { ignoreStartAfter: true });
      expect(taken.map((j) => j.id)).toEqual([id]);
      await dead.stop({ graceful: false });
      expect(await e.getJob(id)).toMatchObject({ state: 'active', attempts: 1 });

      await until('the expired job to run again', async () => (await e.getJob(id))?.state === 'completed', 20_000);
      expect(attempts).toEqual([2]);
      expect(await e.getJob(id)).toMatchObject({ state: 'completed', attempts: 2 });
    },
    T,
  );

  it(
    'aborts a running job at stop after the grace, and another replica retries it',
    async () => {
      const a = await engine();
      const started: Job[] = [];
      await a.work(
        'long',
        (job) =>
          new Promise<void>((_, reject) => {
            started.push(job);
            job.signal.addEventListener('abort', () => reject(job.signal.reason));
          }),
        { retryDelayMs: 0, backoff: false },
      );
      const id = (await a.send('long', {}))!;
      await until('the job to start', () => started.length === 1);
      await a.stop(100);
      expect(started[0].signal.aborted).toBe(true);
      expect(await (await engine()).getJob(id)).toMatchObject({ state: 'retry', attempts: 1, lastError: 'job engine stopped' });

      const b = engines[1];
      const again: number[] = [];
      await b.work('long', async (job) => {
        again.push(job.attempt);
      });
      await until('the job to complete on the other replica', async () => (await b.getJob(id))?.state === 'completed');
      expect(again).toEqual([2]);
    },
    T,
  );

  it(
    'aborts the signal of a job that runs past its timeout and retries it, whatever the late handler does',
    async () => {
      const e = await engine();
      const seen: Job[] = [];
      await e.work(
        'slow',
        async (job) => {
          seen.push(job);
          // The first try ignores the timeout and ends well after it: that end must not complete the job.
          if (job.attempt === 1) await new Promise((r) => job.signal.addEventListener('abort', () => setTimeout(r, 300)));
        },
        { timeoutMs: 1000, retryLimit: 1, retryDelayMs: 0, backoff: false },
      );
      const id = (await e.send('slow', {}))!;
      await until('the retry to complete', async () => (await e.getJob(id))?.state === 'completed', 20_000);
      expect(seen.map((j) => [j.attempt, j.signal.aborted])).toEqual([
        [1, true],
        [2, false],
      ]);
      expect(await e.getJob(id)).toMatchObject({ state: 'completed', attempts: 2 });
    },
    T,
  );

  it(
    'runs a delayed job no earlier than its delay',
    async () => {
      const e = await engine();
      let ranAt = 0;
      await e.work('later', async () => {
        ranAt = Date.now();
      });
      const sentAt = Date.now();
      const id = (await e.send('later', {}, { delayMs: 1500 }))!;
      expect((await e.getJob(id))?.state).toBe('created');
      await until('the delayed job to complete', async () => (await e.getJob(id))?.state === 'completed');
      expect(ranAt - sentAt).toBeGreaterThanOrEqual(1500);
    },
    T,
  );

  it(
    'will not send before start or after stop',
    async () => {
      const e = pgBossEngine({ connectionString: PG_URL!, schema, log });
      engines.push(e);
      await expect(e.send('q', {})).rejects.toThrow(/not started/);
      let ran = 0;
      await e.work('q', async () => {
        ran++;
      });
      await e.start();
      const id = (await e.send('q', {}))!;
      await until('a worker registered before start to run the job', async () => (await e.getJob(id))?.state === 'completed');
      expect(ran).toBe(1);
      await e.stop();
      await expect(e.send('q', {})).rejects.toThrow(/stopped/);
    },
    T,
  );
});
