import type { Kysely } from 'kysely';

// The tool marketplace (issue 14, ADR 0027): installs, stored credentials, custom tools (HTTP, OpenAPI sets, MCP
// servers) and installable-agent installs. `tool_executions` is rebuilt: a call through the API has no run, and a
// call now records how it was made, its error code and which credential step supplied each field (names only).
// `user_id` '' means organization-wide in installs and credentials (an empty string, not NULL, so the unique
// constraints hold the same way on SQLite and PostgreSQL).
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('tool_installs')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('user_id', 'text', (c) => c.notNull()) // '' : organization-wide
    .addColumn('slug', 'text', (c) => c.notNull())
    .addColumn('installed_by_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('tool_installs_owner_slug', ['org_id', 'user_id', 'slug'])
    .execute();

  await db.schema
    .createTable('tool_credentials')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('user_id', 'text', (c) => c.notNull()) // '' : organization-wide
    .addColumn('slug', 'text', (c) => c.notNull())
    .addColumn('fields', 'text', (c) => c.notNull()) // JSON array of the stored field names (never values)
    .addColumn('values_ciphertext', 'text', (c) => c.notNull()) // AES-256-GCM of a JSON object, bound to the row
    .addColumn('updated_by_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('tool_credentials_owner_slug', ['org_id', 'user_id', 'slug'])
    .execute();

  await db.schema
    .createTable('custom_tools')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('slug', 'text', (c) => c.notNull())
    .addColumn('kind', 'text', (c) => c.notNull()) // http | openapi | mcp
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('description', 'text', (c) => c.notNull())
    .addColumn('source', 'text', (c) => c.notNull()) // JSON: what the admin sent (definition, document or server)
    .addColumn('tools', 'text', (c) => c.notNull()) // JSON array of the catalogue entries it yields
    .addColumn('skipped', 'text', (c) => c.notNull()) // JSON array of { name, reason }: what could not be made a tool
    .addColumn('last_refreshed_at', 'text')
    .addColumn('last_error', 'text')
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('custom_tools_org_slug', ['org_id', 'slug'])
    .execute();

  await db.schema
    .createTable('installable_agent_installs')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('user_id', 'text', (c) => c.notNull())
    .addColumn('slug', 'text', (c) => c.notNull())
    .addColumn('agent_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('installable_agent_installs_org').on('installable_agent_installs').columns(['org_id', 'created_at']).execute();

  // tool_executions: run_id nullable, plus via, error_code and credential_sources. Rebuilt (SQLite cannot drop NOT NULL).
  await db.schema
    .createTable('tool_executions_v2')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('user_id', 'text')
    .addColumn('run_id', 'text')
    .addColumn('tool', 'text', (c) => c.notNull())
    .addColumn('via', 'text', (c) => c.notNull()) // api | run
    .addColumn('status', 'text', (c) => c.notNull()) // completed | failed
    .addColumn('error_code', 'text')
    .addColumn('credential_sources', 'text') // JSON object: field -> step (request | override | stored | secret | oauth)
    .addColumn('duration_ms', 'integer', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db
    .insertInto('tool_executions_v2')
    .columns(['id', 'org_id', 'user_id', 'run_id', 'tool', 'via', 'status', 'duration_ms', 'created_at'])
    .expression(
      db
        .selectFrom('tool_executions')
        .select(['id', 'org_id', 'user_id', 'run_id', 'tool', (eb) => eb.val('run').as('via'), 'status', 'duration_ms', 'created_at']),
    )
    .execute();
  await db.schema.dropTable('tool_executions').execute();
  await db.schema.alterTable('tool_executions_v2').renameTo('tool_executions').execute();
  await db.schema.createIndex('tool_executions_org_time').ifNotExists().on('tool_executions').columns(['org_id', 'created_at']).execute();
  await db.schema.createIndex('tool_executions_org_tool').on('tool_executions').columns(['org_id', 'tool', 'created_at']).execute();
}

// Down drops the new tables and index; tool_executions keeps its wider shape (a superset of what 0600 declared,
// which the older code reads and writes unchanged), since API calls without a run cannot be put back.
export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ['installable_agent_installs', 'custom_tools', 'tool_credentials', 'tool_installs']) await db.schema.dropTable(t).execute();
  await db.schema.dropIndex('tool_executions_org_tool').execute();
}
