import type { Kysely } from 'kysely';

// Agent definitions. Portable as the foundation is.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('agents')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('slug', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('description', 'text')
    .addColumn('execution_mode', 'text', (c) => c.notNull())
    .addColumn('target_device_id', 'text')
    .addColumn('model', 'text')
    .addColumn('instructions', 'text')
    .addColumn('tools', 'text', (c) => c.notNull())
    .addColumn('config', 'text', (c) => c.notNull())
    .addColumn('sandbox_template', 'text')
    .addColumn('metadata', 'text', (c) => c.notNull())
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('agents_org_slug', ['org_id', 'slug'])
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('agents').execute();
}
