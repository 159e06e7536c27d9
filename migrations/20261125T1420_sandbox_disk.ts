import type { Kysely } from 'kysely';

// Every sandbox gets a disk of its own size (a filesystem image holding its writable layer, ADR 0014).
// Existing sandboxes get the built-in default, 2048 MiB; their files move into an image of that size at their next start.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('sandboxes').addColumn('disk_mb', 'integer', (c) => c.notNull().defaultTo(2048)).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('sandboxes').dropColumn('disk_mb').execute();
}
