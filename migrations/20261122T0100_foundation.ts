import type { Kysely } from 'kysely';

// Portable across SQLite and PostgreSQL: timestamps are ISO-8601 UTC text (sortable), booleans are
// integers 0/1, JSON is text. See docs/adr/0002-portable-schema.md.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('users')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('email', 'text')
    .addColumn('name', 'text')
    .addColumn('idp_issuer', 'text', (c) => c.notNull())
    .addColumn('idp_subject', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('users_idp_unique', ['idp_issuer', 'idp_subject'])
    .execute();

  await db.schema
    .createTable('organizations')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('idp_org_id', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('slug', 'text', (c) => c.notNull().unique())
    .addColumn('plan', 'text', (c) => c.notNull())
    .addColumn('enterprise', 'integer', (c) => c.notNull())
    .addColumn('settings', 'text', (c) => c.notNull())
    .addColumn('default_project_id', 'text', (c) => c.notNull())
    .addColumn('created_by_user_id', 'text', (c) => c.notNull().references('users.id'))
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('memberships')
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('role', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('memberships_pk', ['org_id', 'user_id'])
    .execute();
  await db.schema.createIndex('memberships_user').on('memberships').columns(['user_id', 'created_at']).execute();

  await db.schema
    .createTable('projects')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('is_default', 'integer', (c) => c.notNull())
    .addColumn('resource_pins', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('projects_org').on('projects').columns(['org_id', 'created_at']).execute();

  await db.schema
    .createTable('api_keys')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('user_id', 'text', (c) => c.notNull().references('users.id'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('environment', 'text', (c) => c.notNull())
    .addColumn('prefix', 'text', (c) => c.notNull())
    .addColumn('hash', 'text', (c) => c.notNull().unique())
    .addColumn('scopes', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('last_used_at', 'text')
    .addColumn('expires_at', 'text')
    .addColumn('revoked_at', 'text')
    .execute();
  await db.schema.createIndex('api_keys_org').on('api_keys').columns(['org_id', 'created_at']).execute();

  await db.schema
    .createTable('activity_events')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('resource_type', 'text', (c) => c.notNull())
    .addColumn('resource_id', 'text', (c) => c.notNull())
    .addColumn('event_type', 'text', (c) => c.notNull())
    .addColumn('severity', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('title', 'text', (c) => c.notNull())
    .addColumn('summary', 'text', (c) => c.notNull())
    .addColumn('actor_user_id', 'text')
    .addColumn('actor_api_key_id', 'text')
    .addColumn('thread_id', 'text')
    .addColumn('agent_run_id', 'text')
    .addColumn('sandbox_id', 'text')
    .addColumn('workspace_id', 'text')
    .addColumn('tool_slug', 'text')
    .addColumn('installable_agent_install_id', 'text')
    .addColumn('code_execution_id', 'text')
    .addColumn('runmesh_node_id', 'text')
    .addColumn('metadata', 'text')
    .addColumn('occurred_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('activity_org_time').on('activity_events').columns(['org_id', 'occurred_at', 'id']).execute();
  await db.schema
    .createIndex('activity_org_resource')
    .on('activity_events')
    .columns(['org_id', 'resource_type', 'resource_id', 'occurred_at'])
    .execute();
  await db.schema
    .createIndex('activity_org_actor')
    .on('activity_events')
    .columns(['org_id', 'actor_user_id', 'occurred_at'])
    .execute();

  await db.schema
    .createTable('workspaces')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('owner_user_id', 'text')
    .addColumn('project_id', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('workspaces_org').on('workspaces').columns(['org_id', 'kind', 'owner_user_id']).execute();

  await db.schema
    .createTable('workspace_files')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('workspace_id', 'text', (c) => c.notNull().references('workspaces.id').onDelete('cascade'))
    .addColumn('path', 'text', (c) => c.notNull())
    .addColumn('parent_path', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('size', 'bigint', (c) => c.notNull())
    .addColumn('mime_type', 'text', (c) => c.notNull())
    .addColumn('blob_key', 'text')
    .addColumn('sha256', 'text')
    .addColumn('created_by_user_id', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('mtime', 'text', (c) => c.notNull())
    .addUniqueConstraint('workspace_files_path_unique', ['workspace_id', 'path'])
    .execute();
  await db.schema
    .createIndex('workspace_files_parent')
    .on('workspace_files')
    .columns(['workspace_id', 'parent_path', 'name'])
    .execute();

  await db.schema
    .createTable('storage_usage')
    .addColumn('org_id', 'text', (c) => c.primaryKey())
    .addColumn('used_bytes', 'bigint', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('credit_ledger')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('amount_cents', 'bigint', (c) => c.notNull())
    .addColumn('idempotency_key', 'text', (c) => c.notNull().unique())
    .addColumn('description', 'text', (c) => c.notNull())
    .addColumn('actor_user_id', 'text')
    .addColumn('metadata', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('credit_ledger_org').on('credit_ledger').columns(['org_id', 'created_at', 'id']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of [
    'credit_ledger',
    'storage_usage',
    'workspace_files',
    'workspaces',
    'activity_events',
    'api_keys',
    'projects',
    'memberships',
    'organizations',
    'users',
  ]) {
    await db.schema.dropTable(table).ifExists().execute();
  }
}
