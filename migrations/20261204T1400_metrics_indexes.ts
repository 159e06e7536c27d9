import type { Kysely } from 'kysely';

// `GET /metrics` (ADR 0040) counts sandboxes by state and runs in progress by status across the installation at each
// scrape. Without these indexes each count reads the whole table; with them the index alone answers.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.createIndex('sandboxes_state').on('sandboxes').columns(['state']).execute();
  await db.schema.createIndex('agent_runs_status').on('agent_runs').columns(['status']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('agent_runs_status').execute();
  await db.schema.dropIndex('sandboxes_state').execute();
}
