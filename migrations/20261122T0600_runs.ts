import type { Kysely } from 'kysely';

// Agent runs, and the sandbox each thread's in_sandbox runs share. Portable as the foundation is.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('agent_runs')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('agent_id', 'text', (c) => c.notNull())
    .addColumn('agent_slug', 'text', (c) => c.notNull())
    .addColumn('thread_id', 'text', (c) => c.notNull())
    .addColumn('rollout_id', 'text')
    .addColumn('sandbox_id', 'text')
    .addColumn('target_device_id', 'text')
    .addColumn('execution_mode', 'text', (c) => c.notNull())
    .addColumn('model', 'text')
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('result', 'text')
    .addColumn('error', 'text')
    .addColumn('usage', 'text', (c) => c.notNull())
    .addColumn('iterations', 'integer', (c) => c.notNull())
    .addColumn('node_id', 'text', (c) => c.notNull())
    .addColumn('metadata', 'text', (c) => c.notNull())
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('finished_at', 'text')
    .execute();
  await db.schema.createIndex('agent_runs_thread').on('agent_runs').columns(['thread_id', 'created_at']).execute();

  // One row per tool execution of a run: the billing service counts them.
  await db.schema
    .createTable('tool_executions')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('user_id', 'text')
    .addColumn('run_id', 'text', (c) => c.notNull())
    .addColumn('tool', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull()) // completed | failed
    .addColumn('duration_ms', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('tool_executions_org_time').on('tool_executions').columns(['org_id', 'created_at']).execute();

  await db.schema
    .createTable('thread_sandboxes')
    .addColumn('thread_id', 'text', (c) => c.primaryKey())
    .addColumn('sandbox_id', 'text', (c) => c.notNull())
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ['thread_sandboxes', 'tool_executions', 'agent_runs']) await db.schema.dropTable(t).execute();
}
