import type { Kysely } from 'kysely';

// `tool_executions` was added to 20261122T0600_runs after that migration had landed, so a database migrated
// before then recorded 0600 as applied and never got the table (every tool call of a run failed there).
// This creates it, with the same columns and index as 0600, only where it is missing; on a database
// migrated after the change it does nothing. Migrations are append-only: a change is always a new file.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('tool_executions')
    .ifNotExists()
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('user_id', 'text')
    .addColumn('run_id', 'text', (c) => c.notNull())
    .addColumn('tool', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull()) // completed | failed
    .addColumn('duration_ms', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema
    .createIndex('tool_executions_org_time')
    .ifNotExists()
    .on('tool_executions')
    .columns(['org_id', 'created_at'])
    .execute();
}

// Nothing to undo: rolled back to 0600, the schema is what 0600 now declares, which includes the table
// (0600's own down drops it).
export async function down(_db: Kysely<any>): Promise<void> {}
