import type { Kysely } from 'kysely';

// An invocation is admitted after counting its deployment's queued invocations (the queue bound) and an invocation
// claims a slot after counting the running ones, both scoped by organization. The index of migration
// 20261128T1700 (deployment_id, status, created_at) lacks org_id, so each count read every counted row from the
// table; with org_id in the index the count is read from the index alone.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.createIndex('deployment_invocations_counts').on('deployment_invocations').columns(['org_id', 'deployment_id', 'status']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('deployment_invocations_counts').execute();
}
