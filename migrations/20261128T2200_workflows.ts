import type { Kysely } from 'kysely';

// Workflows (issue 19, ADR 0035): a named, versioned list of steps run durably on the job engine.
// - workflows: the organization's workflow by `slug` (unique in the organization) and its current `version`.
// - workflow_versions: every version's steps (JSON), kept while the workflow is: a run names the version it runs.
// - workflow_runs: one run of one version: queued -> running -> completed | failed | cancelled, with its input, the
//   step it is at (`step_index`), the starter and their credential's scopes (steps run as them), the trigger that
//   started it and a `dedupe_key` (a cron tick's job), unique per workflow, so a retried tick starts one run.
// - workflow_step_runs: each step of a run: pending -> running -> completed | failed (| skipped when the run ends
//   first), its tries, rendered input, output and last error.
// - workflow_triggers: `cron` (schedule, IANA time zone, the input of its runs) or `webhook` (a global
//   `webhook_slug`, its secret encrypted), enabled or not, run as their creator with the creating credential's scopes.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('workflows')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('slug', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('description', 'text')
    .addColumn('version', 'integer', (c) => c.notNull())
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('workflows_org_slug', ['org_id', 'slug'])
    .execute();
  await db.schema
    .createTable('workflow_versions')
    .addColumn('workflow_id', 'text', (c) => c.notNull().references('workflows.id').onDelete('cascade'))
    .addColumn('version', 'integer', (c) => c.notNull())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('steps', 'text', (c) => c.notNull())
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('workflow_versions_pk', ['workflow_id', 'version'])
    .execute();
  await db.schema
    .createTable('workflow_runs')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('workflow_id', 'text', (c) => c.notNull().references('workflows.id').onDelete('cascade'))
    .addColumn('version', 'integer', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('input', 'text', (c) => c.notNull())
    .addColumn('trigger_id', 'text')
    .addColumn('dedupe_key', 'text')
    .addColumn('started_by_user_id', 'text', (c) => c.notNull())
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('step_index', 'integer', (c) => c.notNull())
    .addColumn('output', 'text')
    .addColumn('error', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('started_at', 'text')
    .addColumn('finished_at', 'text')
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('workflow_runs_dedupe', ['workflow_id', 'dedupe_key'])
    .execute();
  await db.schema.createIndex('workflow_runs_by_workflow').on('workflow_runs').columns(['org_id', 'workflow_id', 'created_at']).execute();
  await db.schema.createIndex('workflow_runs_status').on('workflow_runs').columns(['status', 'updated_at']).execute();
  await db.schema
    .createTable('workflow_step_runs')
    .addColumn('run_id', 'text', (c) => c.notNull().references('workflow_runs.id').onDelete('cascade'))
    .addColumn('idx', 'integer', (c) => c.notNull())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull())
    .addColumn('input', 'text')
    .addColumn('output', 'text')
    .addColumn('error', 'text')
    .addColumn('started_at', 'text')
    .addColumn('finished_at', 'text')
    .addColumn('next_attempt_at', 'text')
    .addPrimaryKeyConstraint('workflow_step_runs_pk', ['run_id', 'idx'])
    .execute();
  await db.schema
    .createTable('workflow_triggers')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('workflow_id', 'text', (c) => c.notNull().references('workflows.id').onDelete('cascade'))
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('enabled', 'integer', (c) => c.notNull())
    .addColumn('webhook_slug', 'text', (c) => c.unique())
    .addColumn('secret_ciphertext', 'text')
    .addColumn('schedule', 'text')
    .addColumn('timezone', 'text')
    .addColumn('input', 'text')
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('last_fired_at', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('workflow_triggers_by_workflow').on('workflow_triggers').columns(['org_id', 'workflow_id']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('workflow_triggers').execute();
  await db.schema.dropTable('workflow_step_runs').execute();
  await db.schema.dropTable('workflow_runs').execute();
  await db.schema.dropTable('workflow_versions').execute();
  await db.schema.dropTable('workflows').execute();
}
