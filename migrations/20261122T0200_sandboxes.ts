import type { Kysely } from 'kysely';

// Persistent sandboxes, their templates and their runtime meter. Portable as the foundation is
// (ISO text timestamps, integer booleans, JSON as text).
export async function up(db: Kysely<any>): Promise<void> {
  // Values one installation keeps for itself (its install id names its runc state and layer folders).
  await db.schema
    .createTable('system_settings')
    .addColumn('key', 'text', (c) => c.primaryKey())
    .addColumn('value', 'text', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('templates')
    .addColumn('id', 'text', (c) => c.primaryKey())
    // 'system' for the built-in templates every organization sees, else the owning organization's id.
    .addColumn('owner', 'text', (c) => c.notNull())
    .addColumn('slug', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('progress', 'integer', (c) => c.notNull())
    .addColumn('os', 'text', (c) => c.notNull())
    .addColumn('source', 'text', (c) => c.notNull()) // base | builder | dockerfile
    .addColumn('request', 'text', (c) => c.notNull()) // the creation request, JSON
    .addColumn('plan', 'text', (c) => c.notNull()) // the build plan, JSON
    .addColumn('parent_id', 'text')
    .addColumn('env', 'text', (c) => c.notNull())
    .addColumn('workdir', 'text')
    .addColumn('error', 'text')
    .addColumn('node_id', 'text')
    .addColumn('created_by_user_id', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addColumn('build_started_at', 'text')
    .addColumn('build_finished_at', 'text')
    .addUniqueConstraint('templates_owner_slug', ['owner', 'slug'])
    .execute();

  await db.schema
    .createTable('sandboxes')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('template_id', 'text', (c) => c.notNull())
    .addColumn('template_slug', 'text', (c) => c.notNull())
    .addColumn('state', 'text', (c) => c.notNull())
    .addColumn('node_id', 'text', (c) => c.notNull())
    .addColumn('uid', 'integer')
    .addColumn('network', 'integer', (c) => c.notNull())
    .addColumn('cpu', 'real', (c) => c.notNull())
    .addColumn('memory_mb', 'integer', (c) => c.notNull())
    .addColumn('idle_timeout_seconds', 'integer', (c) => c.notNull())
    .addColumn('env', 'text', (c) => c.notNull())
    .addColumn('metadata', 'text', (c) => c.notNull())
    .addColumn('error', 'text')
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addColumn('last_active_at', 'text', (c) => c.notNull())
    .addColumn('destroyed_at', 'text')
    .execute();
  await db.schema.createIndex('sandboxes_org_time').on('sandboxes').columns(['org_id', 'created_at', 'id']).execute();
  await db.schema.createIndex('sandboxes_node_state').on('sandboxes').columns(['node_id', 'state']).execute();
  // A host uid belongs to one live sandbox of a node at a time; destroyed sandboxes give theirs up (NULL).
  await db.schema.createIndex('sandboxes_node_uid').on('sandboxes').columns(['node_id', 'uid']).unique().execute();

  // One row per running interval: opened when a sandbox starts or resumes, closed when it pauses, stops
  // or is destroyed. Billing reads settled (closed) and active (open) seconds from here.
  await db.schema
    .createTable('sandbox_runtime')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('sandbox_id', 'text', (c) => c.notNull())
    .addColumn('cpu', 'real', (c) => c.notNull())
    .addColumn('memory_mb', 'integer', (c) => c.notNull())
    .addColumn('started_at', 'text', (c) => c.notNull())
    .addColumn('ended_at', 'text')
    .addColumn('seconds', 'real')
    .execute();
  await db.schema.createIndex('sandbox_runtime_sandbox').on('sandbox_runtime').columns(['sandbox_id', 'started_at']).execute();
  await db.schema.createIndex('sandbox_runtime_org').on('sandbox_runtime').columns(['org_id', 'started_at']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ['sandbox_runtime', 'sandboxes', 'templates', 'system_settings']) await db.schema.dropTable(t).execute();
}
