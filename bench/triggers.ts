/**
 * `triggers`: the durable job engine (ADR 0032) under deployments and triggers.
 *   Job engine throughput: --jobs N no-op jobs sent one after another and worked (concurrency --concurrency),
 *   timed from the first send to the last completion, on the embedded engine (SQLite file in WAL mode, as the
 *   app opens it) and on pg-boss (PostgreSQL, a schema of its own, dropped after). Baseline in the same run and
 *   database: the same number of bare single-row INSERTs of the same shape (what queueing costs at the least).
 *   Rounds alternate (ABBA). PostgreSQL is skipped with a line when unreachable (HANGAR_TEST_DATABASE_URL, else
 *   postgres://postgres@127.0.0.1:5432/test).
 * Options: --jobs N (1000), --concurrency N (4), --rounds N (2), --db sqlite,postgres.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { sql } from 'kysely';
import pg from 'pg';
import pino from 'pino';
import { openDb, type Db } from '../src/platform/db/index.js';
import { migrateToLatest } from '../src/platform/db/migrate.js';
import { embeddedEngine } from '../src/platform/job-engine/embedded.js';
import { pgBossEngine } from '../src/platform/job-engine/pgboss.js';
import type { JobEngine } from '../src/platform/job-engine/types.js';
import { table } from './lib/load.js';

export const description = 'job engine throughput (embedded on SQLite, pg-boss on PostgreSQL) against bare inserts';

const log = pino({ level: 'silent' });
type Engine = Omit<JobEngine, 'schedule' | 'unschedule'>;

async function engineRound(engine: Engine, queue: string, jobs: number): Promise<number> {
  let done = 0;
  let finish!: () => void;
  const all = new Promise<void>((r) => {
    finish = r;
  });
  await engine.work(
    queue,
    async () => {
      if (++done === jobs) finish();
    },
    { concurrency: CONCURRENCY },
  );
  const t0 = performance.now();
  for (let i = 0; i < jobs; i++) await engine.send(queue, { i });
  await all;
  return performance.now() - t0;
}

let CONCURRENCY = 4;

async function bareRound(db: Db, jobs: number): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < jobs; i++) {
    await sql`insert into bench_bare (id, queue, data, state, created_at) values (${randomBytes(8).toString('hex')}, ${'bare'}, ${JSON.stringify({ i })}, ${'created'}, ${new Date().toISOString()})`.execute(
      db.kysely,
    );
  }
  return performance.now() - t0;
}

async function measure(name: string, db: Db, engine: Engine, jobs: number, rounds: number) {
  await sql`create table bench_bare (id text primary key, queue text not null, data text not null, state text not null, created_at text not null)`.execute(
    db.kysely,
  );
  await engine.start();
  const e: number[] = [];
  const b: number[] = [];
  // Warm-up of each, then ABBA.
  await engineRound(engine, `${name}.warm`, Math.min(100, jobs));
  await bareRound(db, Math.min(100, jobs));
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 ? ['engine', 'bare', 'bare', 'engine'] : ['bare', 'engine', 'engine', 'bare'];
    for (const [k, which] of order.entries()) {
      if (which === 'engine') e.push(await engineRound(engine, `${name}.r${r}.${k}`, jobs));
      else b.push(await bareRound(db, jobs));
    }
  }
  await engine.stop();
  const rate = (ms: number[]) => (jobs * ms.length * 1000) / ms.reduce((a, x) => a + x, 0);
  return { engine: rate(e), bare: rate(b) };
}

export async function run(args: string[]): Promise<string> {
  const { values } = parseArgs({
    args,
    options: {
      jobs: { type: 'string', default: '1000' },
      concurrency: { type: 'string', default: '4' },
      rounds: { type: 'string', default: '2' },
      db: { type: 'string', default: 'sqlite,postgres' },
    },
    allowPositionals: true,
  });
  const jobs = Number(values.jobs);
  const rounds = Number(values.rounds);
  CONCURRENCY = Number(values.concurrency);
  if (!Number.isInteger(jobs) || jobs < 1 || !Number.isInteger(rounds) || rounds < 1 || !Number.isInteger(CONCURRENCY) || CONCURRENCY < 1)
    throw new Error('--jobs, --rounds and --concurrency must be positive integers');
  const dbs = String(values.db).split(',');
  const rows: (string | number)[][] = [];
  const summary: string[] = [];

  if (dbs.includes('sqlite')) {
    const dir = mkdtempSync(path.join(tmpdir(), 'hangar-bench-jobs-'));
    const db = await openDb({ kind: 'sqlite', file: path.join(dir, 'hangar.db') });
    try {
      await migrateToLatest(db.kysely, db.dialect);
      const r = await measure('sqlite', db, embeddedEngine(db.kysely, log, { pollMs: 50 }), jobs, rounds);
      rows.push(['sqlite (embedded)', Math.round(r.engine), Math.round(r.bare), (r.engine / r.bare).toFixed(2)]);
      summary.push(`sqlite ${Math.round(r.engine)} jobs/s = ${(r.engine / r.bare).toFixed(2)} of bare inserts`);
    } finally {
      await db.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }

  if (dbs.includes('postgres')) {
    const url = process.env.HANGAR_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
    const schema = `bench_jobs_${process.pid}_${randomBytes(3).toString('hex')}`;
    const admin = new pg.Client({ connectionString: url });
    const reachable = await admin.connect().then(
      () => true,
      (err: Error) => {
        console.log(`postgresql: SKIPPED (${url} unreachable: ${err.message})`);
        return false;
      },
    );
    if (reachable) {
      let db: Db | null = null;
      try {
        db = await openDb({ kind: 'postgres', url, schema });
        const r = await measure('postgres', db, pgBossEngine({ connectionString: url, schema: `${schema}_pgboss`, log }), jobs, rounds);
        rows.push(['postgres (pg-boss)', Math.round(r.engine), Math.round(r.bare), (r.engine / r.bare).toFixed(2)]);
        summary.push(`postgres ${Math.round(r.engine)} jobs/s = ${(r.engine / r.bare).toFixed(2)} of bare inserts`);
      } catch (err) {
        console.log(`postgresql: SKIPPED (${(err as Error).message})`);
      } finally {
        await db?.close();
        await admin.query(`drop schema if exists "${schema}" cascade`).catch(() => undefined);
        await admin.query(`drop schema if exists "${schema}_pgboss" cascade`).catch(() => undefined);
        await admin.end().catch(() => undefined);
      }
    }
  }

  console.log(`\n${jobs} jobs per round, concurrency ${CONCURRENCY}, ${rounds * 2} rounds each (ABBA)`);
  console.log(table(['engine', 'jobs/s (send → done)', 'bare inserts/s', 'ratio'], rows));
  return `triggers: job engine ${summary.join('; ')}`;
}
