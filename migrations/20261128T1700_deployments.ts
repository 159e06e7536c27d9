import type { Kysely } from 'kysely';

// Deployments, their invocations and signed outbound webhooks, and agent triggers (issue 19, ADR 0033).
// - deployments: an agent (`agent_slug`, the spec's runtimeSlug) behind a public name (`api_slug`, unique in the
//   organization), its sandbox template, its concurrency and timeout, and its webhook: URL, events, the signing
//   secret (encrypted; the previous one kept until `webhook_previous_until` after a rotation), disabled when the
//   receiver answered 410.
// - deployment_invocations: one call of a deployment (by API or trigger): queued -> running -> completed | failed |
//   cancelled | timed_out, with the run it made.
// - webhook_deliveries: one event for one deployment's webhook, its id stable across retries (the `webhook-id`):
//   pending -> delivered | failed (attempts exhausted) | disabled (410); webhook_delivery_attempts: each try.
// - triggers: an inbound webhook bound to a deployment: source, events, message template, IP allowlist, repo,
//   secret (encrypted), active | paused. trigger_deliveries: delivery ids seen, so a replay is refused.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('deployments')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('api_slug', 'text', (c) => c.notNull())
    .addColumn('agent_slug', 'text', (c) => c.notNull())
    .addColumn('template_slug', 'text')
    .addColumn('webhook_url', 'text')
    .addColumn('webhook_events', 'text', (c) => c.notNull())
    .addColumn('webhook_secret_ciphertext', 'text', (c) => c.notNull())
    .addColumn('webhook_previous_secret_ciphertext', 'text')
    .addColumn('webhook_previous_until', 'text')
    .addColumn('webhook_disabled_at', 'text')
    .addColumn('webhook_disabled_reason', 'text')
    .addColumn('max_concurrent', 'integer', (c) => c.notNull())
    .addColumn('timeout_seconds', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('deployments_api_slug', ['org_id', 'api_slug'])
    .execute();

  await db.schema
    .createTable('deployment_invocations')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('deployment_id', 'text', (c) => c.notNull().references('deployments.id').onDelete('cascade'))
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    // The invoking credential's scopes (JSON): the run gets no more than these and the member's role grants then.
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('source', 'text', (c) => c.notNull())
    .addColumn('trigger_id', 'text')
    .addColumn('input', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('run_id', 'text')
    .addColumn('thread_id', 'text')
    .addColumn('error', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('started_at', 'text')
    .addColumn('finished_at', 'text')
    .execute();
  await db.schema.createIndex('deployment_invocations_state').on('deployment_invocations').columns(['deployment_id', 'status', 'created_at']).execute();

  await db.schema
    .createTable('webhook_deliveries')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('deployment_id', 'text', (c) => c.notNull().references('deployments.id').onDelete('cascade'))
    .addColumn('event_type', 'text', (c) => c.notNull())
    .addColumn('payload', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull())
    .addColumn('next_attempt_at', 'text')
    .addColumn('last_status_code', 'integer')
    .addColumn('last_error', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('delivered_at', 'text')
    .execute();
  await db.schema.createIndex('webhook_deliveries_deployment').on('webhook_deliveries').columns(['deployment_id', 'created_at']).execute();

  await db.schema
    .createTable('webhook_delivery_attempts')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('delivery_id', 'text', (c) => c.notNull().references('webhook_deliveries.id').onDelete('cascade'))
    .addColumn('attempt', 'integer', (c) => c.notNull())
    .addColumn('status_code', 'integer')
    .addColumn('error', 'text')
    .addColumn('duration_ms', 'integer', (c) => c.notNull())
    .addColumn('at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('webhook_delivery_attempts_delivery').on('webhook_delivery_attempts').columns(['delivery_id', 'attempt']).execute();

  await db.schema
    .createTable('triggers')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('deployment_id', 'text', (c) => c.notNull().references('deployments.id').onDelete('cascade'))
    // The creating credential's scopes (JSON): a firing acts with no more than these and the creator's role.
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('source', 'text', (c) => c.notNull())
    .addColumn('events', 'text', (c) => c.notNull())
    .addColumn('message', 'text', (c) => c.notNull())
    .addColumn('allowed_ips', 'text', (c) => c.notNull())
    .addColumn('repo', 'text')
    .addColumn('secret_ciphertext', 'text')
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('triggers_org').on('triggers').columns(['org_id', 'created_at']).execute();

  await db.schema
    .createTable('trigger_deliveries')
    .addColumn('trigger_id', 'text', (c) => c.notNull().references('triggers.id').onDelete('cascade'))
    .addColumn('delivery_id', 'text', (c) => c.notNull())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('received_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('trigger_deliveries_pk', ['trigger_id', 'delivery_id'])
    .execute();
  await db.schema.createIndex('trigger_deliveries_age').on('trigger_deliveries').columns(['received_at']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ['trigger_deliveries', 'triggers', 'webhook_delivery_attempts', 'webhook_deliveries', 'deployment_invocations', 'deployments'])
    await db.schema.dropTable(t).execute();
}
