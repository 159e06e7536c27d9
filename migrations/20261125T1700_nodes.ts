import type { Kysely } from 'kysely';

// The registry of Hangar nodes (ADR 0024): each node that serves sandboxes writes its row every heartbeat, so any
// replica knows where to forward a sandbox's requests, where a new sandbox has room, and which node went silent.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('nodes')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('url', 'text') // its internal address; null until it listens
    .addColumn('sandboxes_available', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('running_sandboxes', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('memory_capacity_mb', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('memory_committed_mb', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('started_at', 'text', (c) => c.notNull())
    .addColumn('heartbeat_at', 'text', (c) => c.notNull())
    // Set by the replica that stopped this node's sandboxes after it went silent; the node clears it when back.
    .addColumn('declared_dead_at', 'text')
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('nodes').execute();
}
