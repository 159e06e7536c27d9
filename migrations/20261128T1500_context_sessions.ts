import type { Kysely } from 'kysely';

// Context sessions (issue 18, ADR 0031).
// - context_sessions: a member's reusable memory. The counters (total_tokens, block_count) are kept in step with
//   its blocks by every write, in the same transaction; `tokenizer` is the encoding its blocks are counted with
//   (chosen from the default agent's model). `next_position` orders blocks (a block's position never changes; a
//   summary takes the position of the first block it replaces). `lease_holder`/`lease_until` serialize the work
//   that must not interleave on one session across replicas (a run using it, a compaction, a fork, block writes).
// - context_session_tags: the session's tags, one row each, for `GET /v1/aip/sessions?tag=`.
// - context_blocks: the material: kind, content, tags (JSON array), pinned, token count, source (JSON).
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('context_sessions')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('default_agent', 'text')
    .addColumn('tags', 'text', (c) => c.notNull())
    .addColumn('forked_from', 'text')
    .addColumn('tokenizer', 'text', (c) => c.notNull())
    .addColumn('total_tokens', 'integer', (c) => c.notNull())
    .addColumn('block_count', 'integer', (c) => c.notNull())
    .addColumn('compaction_count', 'integer', (c) => c.notNull())
    .addColumn('invocation_count', 'integer', (c) => c.notNull())
    .addColumn('next_position', 'integer', (c) => c.notNull())
    .addColumn('lease_holder', 'text')
    .addColumn('lease_until', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('context_sessions_owner').on('context_sessions').columns(['org_id', 'created_by_user_id', 'created_at']).execute();

  await db.schema
    .createTable('context_session_tags')
    .addColumn('session_id', 'text', (c) => c.notNull().references('context_sessions.id').onDelete('cascade'))
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('tag', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('context_session_tags_pk', ['session_id', 'tag'])
    .execute();
  await db.schema.createIndex('context_session_tags_tag').on('context_session_tags').columns(['org_id', 'tag']).execute();

  await db.schema
    .createTable('context_blocks')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull())
    .addColumn('session_id', 'text', (c) => c.notNull().references('context_sessions.id').onDelete('cascade'))
    .addColumn('position', 'integer', (c) => c.notNull())
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('content', 'text', (c) => c.notNull())
    .addColumn('tags', 'text', (c) => c.notNull())
    .addColumn('pinned', 'integer', (c) => c.notNull())
    .addColumn('tokens', 'integer', (c) => c.notNull())
    .addColumn('source', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('context_blocks_position', ['session_id', 'position'])
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ['context_blocks', 'context_session_tags', 'context_sessions']) await db.schema.dropTable(t).execute();
}
