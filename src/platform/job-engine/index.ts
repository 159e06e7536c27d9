/** The job engine for the configured database: pg-boss on PostgreSQL, the embedded engine on SQLite (ADR 0032). */
import { sql, type Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { Config } from '../../config.js';
import type { Database } from '../../database.js';
import { embeddedEngine } from './embedded.js';
import { pgBossEngine, type PgBossEngine } from './pgboss.js';
import { createScheduler } from './scheduler.js';
import type { JobEngine } from './types.js';

export { cronProblem, nextTick } from './cron.js';
export type { Job, JobEngine, JobHandler, JobInfo, JobState, QueueOptions, ScheduleSpec, SendOptions } from './types.js';

type BaseEngine = Omit<JobEngine, 'schedule' | 'unschedule'>;

/** Adds the shared cron scheduler to an engine: started after it, stopped before it. */
export function withSchedules(base: BaseEngine, db: Kysely<Database>, log: Pick<Logger, 'warn'>): JobEngine & { tick(now?: Date): Promise<number> } {
  const scheduler = createScheduler(db, (queue, data, opts) => base.send(queue, data, opts), log);
  return {
    kind: base.kind,
    work: (queue, handler, opts) => base.work(queue, handler, opts),
    send: (queue, data, opts) => base.send(queue, data, opts),
    getJob: (id) => base.getJob(id),
    backlog: () => base.backlog(),
    schedule: (name, spec) => scheduler.schedule(name, spec),
    unschedule: (name) => scheduler.unschedule(name),
    tick: (now) => scheduler.tick(now),
    async start() {
      await base.start();
      scheduler.start();
    },
    async stop(graceMs) {
      await scheduler.stop();
      await base.stop(graceMs);
    },
  };
}

/** pg-boss's schema: `pgboss`, or `<schema>_pgboss` beside the app's own schema when DATABASE_URL names one. */
export function pgBossSchema(database: Config['database']): string {
  return database.kind === 'postgres' && database.schema ? `${database.schema}_pgboss` : 'pgboss';
}

const PROBE_MS = 30_000;

/**
 * pg-boss started when first needed: at start() when its schema already exists (jobs may be waiting), else at the
 * first send (a process that never queues anything, like most test apps, never creates it), or once another
 * replica has created it (probed every PROBE_MS). Workers declared before that are attached when it starts.
 */
function lazyPgBoss(make: () => PgBossEngine, exists: () => Promise<boolean>, log: Pick<Logger, 'warn'>): BaseEngine {
  // A stopped pg-boss cannot start again: each start after a stop gets a fresh one (an app closed and another built
  // on the same collaborators, as tests do).
  let base = make();
  let live: Promise<void> | null = null;
  let probe: NodeJS.Timeout | null = null;
  const ensure = () => {
    live ??= base.start().catch((err) => {
      live = null;
      throw err;
    });
    return live;
  };
  return {
    kind: 'pg-boss',
    work: (queue, handler, opts) => base.work(queue, handler, opts),
    async send(queue, data, opts) {
      await ensure();
      return base.send(queue, data, opts);
    },
    async getJob(id) {
      if (!live) return null;
      await live;
      return base.getJob(id);
    },
    async backlog() {
      if (!live) return [];
      await live;
      return base.backlog();
    },
    async start() {
      if (await exists()) {
        await ensure();
        return;
      }
      probe = setInterval(() => {
        if (live) return;
        exists()
          .then((yes) => (yes ? ensure() : undefined))
          .catch((err) => log.warn({ err }, 'job engine: starting pg-boss failed'));
      }, PROBE_MS);
      probe.unref();
    },
    async stop(graceMs) {
      if (probe) clearInterval(probe);
      probe = null;
      await live?.catch(() => undefined);
      await base.stop(graceMs);
      base = make();
      live = null;
    },
  };
}

export function createJobEngine(config: Config, db: Kysely<Database>, log: Logger): JobEngine {
  if (config.database.kind !== 'postgres') return withSchedules(embeddedEngine(db, log), db, log);
  const schema = pgBossSchema(config.database);
  const url = config.database.url;
  const make = () => pgBossEngine({ connectionString: url, schema, log });
  const exists = async () => {
    const r = await sql<{ found: string | null }>`select to_regclass(${`"${schema}".job`}) as found`.execute(db);
    return Boolean(r.rows[0]?.found);
  };
  return withSchedules(lazyPgBoss(make, exists, log), db, log);
}
