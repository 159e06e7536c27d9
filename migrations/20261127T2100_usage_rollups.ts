import { sql, type Kysely } from 'kysely';

// Daily sums of the meter's final events (issue 15, ADR 0028). Events that are settled or forgiven never change
// again, so the transaction that makes an event final adds it to its day's row here, and the usage page reads a
// few rows a day instead of every event. A database migrated before this file already holds final events: they
// are summed in here once, as the meter would have. Also an index for the usage page's per-organization reads of
// events not final yet.
// The billing migration was released in two versions: the first without usage_rollups and this index, a later one
// with both (its rollups kept by the meter from the start). A database that ran the later one has nothing to do here.
export async function up(db: Kysely<any>): Promise<void> {
  const tables = await db.introspection.getTables();
  if (tables.some((t) => t.name === 'usage_rollups')) return;

  await db.schema.createIndex('usage_events_org_state').on('usage_events').columns(['org_id', 'state', 'created_at']).execute();

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

  // The final events already there, grouped exactly as billing's rollUp groups them (groupSubject in meter.ts).
  await sql`INSERT INTO usage_rollups (org_id, day, user_id, kind, subject, tier, state, events, input_tokens, output_tokens,
      cached_input_tokens, reasoning_tokens, quantity, cost_micros)
    SELECT org_id, substr(created_at, 1, 10), COALESCE(user_id, ''), kind,
      CASE WHEN kind IN ('model_tokens', 'tool_execution', 'code_execution') THEN subject ELSE '' END, tier, state,
      COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cached_input_tokens), SUM(reasoning_tokens), SUM(quantity), SUM(cost_micros)
    FROM usage_events
    WHERE state IN ('settled', 'forgiven')
    GROUP BY org_id, substr(created_at, 1, 10), COALESCE(user_id, ''), kind,
      CASE WHEN kind IN ('model_tokens', 'tool_execution', 'code_execution') THEN subject ELSE '' END, tier, state`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('usage_rollups').execute();
  await db.schema.dropIndex('usage_events_org_state').execute();
}
