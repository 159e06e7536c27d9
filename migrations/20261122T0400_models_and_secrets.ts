import type { Kysely } from 'kysely';

// Organization and user secrets (encrypted values; names only are ever returned) and the platform model
// usage meter. Portable as the foundation is.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('secrets')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    // 'org' for an organization secret, else the owning user's id.
    .addColumn('owner', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('ciphertext', 'text', (c) => c.notNull())
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('secrets_owner_name', ['org_id', 'owner', 'name'])
    .execute();

  // One row per model call: platform calls carry their cost; calls with the customer's own key cost 0.
  await db.schema
    .createTable('model_usage')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('user_id', 'text')
    .addColumn('model', 'text', (c) => c.notNull())
    .addColumn('tier', 'text', (c) => c.notNull()) // platform | byok
    .addColumn('source', 'text', (c) => c.notNull()) // proxy | run
    .addColumn('run_id', 'text')
    .addColumn('input_tokens', 'integer', (c) => c.notNull())
    .addColumn('output_tokens', 'integer', (c) => c.notNull())
    .addColumn('cached_input_tokens', 'integer', (c) => c.notNull())
    .addColumn('reasoning_tokens', 'integer', (c) => c.notNull())
    .addColumn('cost_micros', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('model_usage_org_time').on('model_usage').columns(['org_id', 'created_at']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ['model_usage', 'secrets']) await db.schema.dropTable(t).execute();
}
