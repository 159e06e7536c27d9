import type { Kysely } from 'kysely';

// The deployments' sweep (issue 19): every minute it looks for work whose job was never sent (a send that failed
// after its transaction committed) by status and age, across organizations; these indexes keep that lookup off a
// scan of every invocation and delivery ever made.
// `slot_wait_since`: when a queued invocation found its deployment's slots all taken (null until then); an
// invocation that ends wakes the oldest of these instead of each polling for a slot.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('deployment_invocations').addColumn('slot_wait_since', 'text').execute();
  await db.schema.createIndex('deployment_invocations_status').on('deployment_invocations').columns(['status', 'created_at']).execute();
  await db.schema.createIndex('webhook_deliveries_status').on('webhook_deliveries').columns(['status', 'next_attempt_at']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('webhook_deliveries_status').execute();
  await db.schema.dropIndex('deployment_invocations_status').execute();
  await db.schema.alterTable('deployment_invocations').dropColumn('slot_wait_since').execute();
}
