import type { Kysely } from 'kysely';

// The deployments' sweep (issue 19): every minute it looks for work whose job was never sent (a send that failed
// after its transaction committed) by status and age, across organizations; these indexes keep that lookup off a
// scan of every invocation and delivery ever made.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.createIndex('deployment_invocations_status').on('deployment_invocations').columns(['status', 'created_at']).execute();
  await db.schema.createIndex('webhook_deliveries_status').on('webhook_deliveries').columns(['status', 'next_attempt_at']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('webhook_deliveries_status').execute();
  await db.schema.dropIndex('deployment_invocations_status').execute();
}
