import type { Kysely } from 'kysely';

// Threads, their rollouts, the SQL projection of their durable events (the JSONL in the blob store is the
// source of truth) and the one-active-run lock. Portable as the foundation is.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('threads')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('owner_user_id', 'text')
    .addColumn('agent_id', 'text')
    .addColumn('title', 'text')
    .addColumn('execution_mode', 'text', (c) => c.notNull())
    .addColumn('archived', 'integer', (c) => c.notNull())
    .addColumn('active_rollout_id', 'text')
    .addColumn('metadata', 'text', (c) => c.notNull())
    // The last sequence given out, and how many bytes of the JSONL file the projection covers.
    .addColumn('last_sequence', 'integer', (c) => c.notNull())
    .addColumn('jsonl_bytes', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('threads_owner').on('threads').columns(['org_id', 'owner_user_id', 'updated_at', 'id']).execute();
  await db.schema.createIndex('threads_org').on('threads').columns(['org_id', 'updated_at', 'id']).execute();

  await db.schema
    .createTable('thread_rollouts')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('thread_id', 'text', (c) => c.notNull().references('threads.id').onDelete('cascade'))
    .addColumn('position', 'integer', (c) => c.notNull())
    .addColumn('kind', 'text', (c) => c.notNull()) // initial | compaction
    .addColumn('status', 'text', (c) => c.notNull()) // active | closed
    .addColumn('from_rollout_id', 'text')
    .addColumn('summary', 'text')
    .addColumn('summary_method', 'text') // extractive | model
    .addColumn('summary_model', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('closed_at', 'text')
    .addUniqueConstraint('thread_rollouts_position', ['thread_id', 'position'])
    .execute();

  await db.schema
    .createTable('thread_events')
    .addColumn('thread_id', 'text', (c) => c.notNull().references('threads.id').onDelete('cascade'))
    .addColumn('sequence', 'integer', (c) => c.notNull())
    .addColumn('rollout_id', 'text', (c) => c.notNull())
    .addColumn('run_id', 'text')
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('payload', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('thread_events_pk', ['thread_id', 'sequence'])
    .execute();
  await db.schema.createIndex('thread_events_rollout').on('thread_events').columns(['thread_id', 'rollout_id', 'sequence']).execute();

  // At most one active run per thread, across replicas: a row per held lock, taken over once expired.
  await db.schema
    .createTable('thread_run_locks')
    .addColumn('thread_id', 'text', (c) => c.primaryKey())
    .addColumn('run_id', 'text', (c) => c.notNull())
    .addColumn('holder', 'text', (c) => c.notNull())
    .addColumn('acquired_at', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'text', (c) => c.notNull())
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ['thread_run_locks', 'thread_events', 'thread_rollouts', 'threads']) await db.schema.dropTable(t).execute();
}
