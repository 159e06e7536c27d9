import { sql, type Kysely } from 'kysely';

// The durable job engine (ADR 0032).
// - jobs: the embedded engine's queue (SQLite default; on PostgreSQL pg-boss keeps its own tables in its own
//   schema and this one stays empty). `key` is the idempotency key: one job per (queue, key) while the row is kept.
//   state created | retry | active | completed | failed | cancelled; a job is claimed by moving it to active with
//   `expires_at`, and one active past it is retried (or failed) as a timed-out attempt.
// - job_schedules: cron schedules, for both engines: `last_tick` is the latest tick sent; each tick is sent as a
//   job keyed by the schedule and the tick, so replicas that see the same tick create one job.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('jobs')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('queue', 'text', (c) => c.notNull())
    .addColumn('key', 'text')
    .addColumn('data', 'text', (c) => c.notNull())
    .addColumn('state', 'text', (c) => c.notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull())
    .addColumn('retry_limit', 'integer', (c) => c.notNull())
    .addColumn('run_after', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'text')
    .addColumn('last_error', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('finished_at', 'text')
    .execute();
  await db.schema.createIndex('jobs_due').on('jobs').columns(['queue', 'state', 'run_after']).execute();
  await db.schema
    .createIndex('jobs_key')
    .on('jobs')
    .columns(['queue', 'key'])
    .unique()
    .where(sql.ref('key'), 'is not', null)
    .execute();

  await db.schema
    .createTable('job_schedules')
    .addColumn('name', 'text', (c) => c.primaryKey())
    .addColumn('cron', 'text', (c) => c.notNull())
    .addColumn('tz', 'text', (c) => c.notNull())
    .addColumn('queue', 'text', (c) => c.notNull())
    .addColumn('data', 'text', (c) => c.notNull())
    .addColumn('last_tick', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ['job_schedules', 'jobs']) await db.schema.dropTable(t).execute();
}
