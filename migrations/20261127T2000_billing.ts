import { sql, type Kysely } from 'kysely';

// Billing that charges (issue 15, ADR 0028).
// - credit_ledger gains amount_micros (micro-dollars): a model call costs fractions of a cent, and the ledger must
//   hold exactly what was charged. amount_cents stays, rounded, for readers of the old column.
// - billing_accounts: one row per organization: its plan, the balance cache (updated in the same transaction as
//   every ledger insert), the pending runtime estimate, exhaustion, the payment customer and auto top-up.
// - usage_events: the meter. Every metered record (a model call, a tool call, a code execution, a sandbox's
//   running interval, a day of storage) is one event, unique by (kind, source_id); `state` moves
//   pending -> due -> settled, or pending -> forgiven, and settling writes the ledger entry keyed by the event.
// - topups, payment_events (webhook replay), promo_codes, promo_redemptions.
// - storage_usage (storage's table) gains the byte-second accumulator charged daily.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('credit_ledger').addColumn('amount_micros', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
  await sql`UPDATE credit_ledger SET amount_micros = amount_cents * 10000`.execute(db);

  await db.schema
    .createTable('billing_accounts')
    .addColumn('org_id', 'text', (c) => c.primaryKey().references('organizations.id').onDelete('cascade'))
    .addColumn('plan', 'text', (c) => c.notNull())
    .addColumn('balance_micros', 'bigint', (c) => c.notNull())
    .addColumn('pending_micros', 'bigint', (c) => c.notNull())
    .addColumn('exhausted_at', 'text')
    .addColumn('payment_customer_id', 'text')
    .addColumn('payment_method_id', 'text')
    .addColumn('auto_topup_enabled', 'integer', (c) => c.notNull())
    .addColumn('auto_topup_threshold_cents', 'bigint', (c) => c.notNull())
    .addColumn('auto_topup_amount_cents', 'bigint', (c) => c.notNull())
    .addColumn('auto_topup_failures', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();
  const now = new Date().toISOString();
  await sql`INSERT INTO billing_accounts (org_id, plan, balance_micros, pending_micros, auto_topup_enabled, auto_topup_threshold_cents,
      auto_topup_amount_cents, auto_topup_failures, created_at, updated_at)
    SELECT o.id, 'free', COALESCE((SELECT SUM(l.amount_micros) FROM credit_ledger l WHERE l.org_id = o.id), 0), 0, 0, 0, 0, 0, ${now}, ${now}
    FROM organizations o`.execute(db);

  await db.schema
    .createTable('usage_events')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('user_id', 'text')
    .addColumn('kind', 'text', (c) => c.notNull()) // model_tokens | tool_execution | code_execution | sandbox_runtime | storage
    .addColumn('source_id', 'text', (c) => c.notNull()) // the metered record (model_usage id, sandbox_runtime id, ...)
    .addColumn('subject', 'text', (c) => c.notNull()) // model id, tool slug, language, sandbox id, 'workspace'
    .addColumn('tier', 'text', (c) => c.notNull()) // platform | byok
    .addColumn('input_tokens', 'bigint', (c) => c.notNull().defaultTo(0))
    .addColumn('output_tokens', 'bigint', (c) => c.notNull().defaultTo(0))
    .addColumn('cached_input_tokens', 'bigint', (c) => c.notNull().defaultTo(0))
    .addColumn('reasoning_tokens', 'bigint', (c) => c.notNull().defaultTo(0))
    .addColumn('quantity', 'double precision', (c) => c.notNull().defaultTo(0)) // seconds, cpu-seconds, byte-seconds, calls
    .addColumn('cost_micros', 'bigint', (c) => c.notNull())
    .addColumn('state', 'text', (c) => c.notNull()) // pending | due | settled | forgiven
    .addColumn('ledger_entry_id', 'text')
    .addColumn('metadata', 'text')
    .addColumn('started_at', 'text', (c) => c.notNull())
    .addColumn('ended_at', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('usage_events_kind_source', ['kind', 'source_id'])
    .execute();
  await db.schema.createIndex('usage_events_org_time').on('usage_events').columns(['org_id', 'created_at']).execute();
  await db.schema.createIndex('usage_events_org_user_time').on('usage_events').columns(['org_id', 'user_id', 'created_at']).execute();
  await db.schema.createIndex('usage_events_state').on('usage_events').columns(['state', 'created_at']).execute();
  await db.schema.createIndex('usage_events_org_state').on('usage_events').columns(['org_id', 'state', 'created_at']).execute();

  // Daily sums of the meter's final events (settled, forgiven: they never change again), kept by the transaction
  // that makes an event final, so the usage page reads a few rows a day instead of every event (ADR 0028).
  await db.schema
    .createTable('usage_rollups')
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('day', 'text', (c) => c.notNull()) // YYYY-MM-DD (UTC) of the events' created_at
    .addColumn('user_id', 'text', (c) => c.notNull()) // '' : no user (workspace storage)
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('subject', 'text', (c) => c.notNull()) // '' for sandbox runtime and storage (not grouped by sandbox)
    .addColumn('tier', 'text', (c) => c.notNull())
    .addColumn('state', 'text', (c) => c.notNull()) // settled | forgiven
    .addColumn('events', 'bigint', (c) => c.notNull())
    .addColumn('input_tokens', 'bigint', (c) => c.notNull())
    .addColumn('output_tokens', 'bigint', (c) => c.notNull())
    .addColumn('cached_input_tokens', 'bigint', (c) => c.notNull())
    .addColumn('reasoning_tokens', 'bigint', (c) => c.notNull())
    .addColumn('quantity', 'double precision', (c) => c.notNull())
    .addColumn('cost_micros', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('usage_rollups_pk', ['org_id', 'day', 'user_id', 'kind', 'subject', 'tier', 'state'])
    .execute();

  await db.schema
    .createTable('topups')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('kind', 'text', (c) => c.notNull()) // checkout | auto
    .addColumn('provider_ref', 'text', (c) => c.unique()) // checkout session id or payment intent id
    .addColumn('amount_cents', 'bigint', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull()) // pending | completed | failed | expired
    .addColumn('idempotency_key', 'text')
    .addColumn('url', 'text')
    .addColumn('failure_reason', 'text')
    .addColumn('created_by_user_id', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addColumn('completed_at', 'text')
    .addUniqueConstraint('topups_org_idempotency', ['org_id', 'idempotency_key'])
    .execute();
  await db.schema.createIndex('topups_org_time').on('topups').columns(['org_id', 'created_at']).execute();

  await db.schema
    .createTable('payment_events')
    .addColumn('id', 'text', (c) => c.primaryKey()) // the provider's event id
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('received_at', 'text', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('promo_codes')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('code', 'text', (c) => c.notNull().unique()) // upper case
    .addColumn('credits_cents', 'bigint', (c) => c.notNull())
    .addColumn('max_redemptions', 'integer', (c) => c.notNull())
    .addColumn('redemptions', 'integer', (c) => c.notNull())
    .addColumn('expires_at', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('promo_redemptions')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('promo_id', 'text', (c) => c.notNull().references('promo_codes.id').onDelete('cascade'))
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('promo_redemptions_promo_org', ['promo_id', 'org_id'])
    .execute();

  await db.schema.alterTable('storage_usage').addColumn('byte_seconds', 'double precision', (c) => c.notNull().defaultTo(0)).execute();
  await db.schema.alterTable('storage_usage').addColumn('accounted_at', 'text').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ['usage_rollups', 'promo_redemptions', 'promo_codes', 'payment_events', 'topups', 'usage_events', 'billing_accounts']) await db.schema.dropTable(t).execute();
  await db.schema.alterTable('storage_usage').dropColumn('accounted_at').execute();
  await db.schema.alterTable('storage_usage').dropColumn('byte_seconds').execute();
  await db.schema.alterTable('credit_ledger').dropColumn('amount_micros').execute();
}
