/** The sessions domain's SQL; every query of an organization's rows is scoped here. */
import { sql, type Insertable, type Selectable, type Updateable } from 'kysely';
import type { ContextBlocksTable, ContextSessionsTable } from '../../database.js';
import { exec, orgId, type Ctx } from '../../platform/context.js';
import { newestFirstPage } from '../../platform/db/pages.js';

export type SessionRow = Selectable<ContextSessionsTable>;
export type BlockRow = Selectable<ContextBlocksTable>;
/** A block without its content: what ordering, filters and metrics need. */
export type BlockMeta = Pick<BlockRow, 'id' | 'position' | 'kind' | 'tags' | 'pinned' | 'tokens'>;

/** Rows per INSERT / IN list: well inside SQLite's 32,766 bound variables for a 12-column table. */
const CHUNK = 500;

export const findSession = (ctx: Ctx, id: string) =>
  exec(ctx).selectFrom('context_sessions').selectAll().where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();

export const insertSession = (ctx: Ctx, row: Insertable<ContextSessionsTable>) => exec(ctx).insertInto('context_sessions').values(row).execute();

export const updateSessionRow = (ctx: Ctx, id: string, set: Updateable<ContextSessionsTable>) =>
  exec(ctx).updateTable('context_sessions').set(set).where('org_id', '=', orgId(ctx)).where('id', '=', id).execute();

/** Counter changes applied in SQL (never read-modify-write). */
export const bumpSession = (
  ctx: Ctx,
  id: string,
  d: { tokens?: number; blocks?: number; positions?: number; compactions?: number; invocations?: number; at: string },
) =>
  exec(ctx)
    .updateTable('context_sessions')
    .set({
      total_tokens: sql`total_tokens + ${d.tokens ?? 0}`,
      block_count: sql`block_count + ${d.blocks ?? 0}`,
      next_position: sql`next_position + ${d.positions ?? 0}`,
      compaction_count: sql`compaction_count + ${d.compactions ?? 0}`,
      invocation_count: sql`invocation_count + ${d.invocations ?? 0}`,
      updated_at: d.at,
    })
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .execute();

export const setSessionTags = async (ctx: Ctx, id: string, tags: readonly string[]) => {
  await exec(ctx).deleteFrom('context_session_tags').where('org_id', '=', orgId(ctx)).where('session_id', '=', id).execute();
  if (tags.length)
    await exec(ctx)
      .insertInto('context_session_tags')
      .values([...new Set(tags)].map((tag) => ({ session_id: id, org_id: orgId(ctx), tag })))
      .execute();
};

/** The member's sessions, newest first, optionally with a tag. */
export const sessionPage = (ctx: Ctx, userId: string, q: { tag?: string; cursor?: string; limit: number }) => {
  let query = exec(ctx).selectFrom('context_sessions').selectAll().where('org_id', '=', orgId(ctx)).where('created_by_user_id', '=', userId);
  if (q.tag) {
    const tag = q.tag;
    query = query.where((eb) =>
      eb.exists(
        eb
          .selectFrom('context_session_tags')
          .select('tag')
          .whereRef('context_session_tags.session_id', '=', 'context_sessions.id')
          .where('context_session_tags.org_id', '=', orgId(ctx))
          .where('context_session_tags.tag', '=', tag),
      ),
    );
  }
  return newestFirstPage(query, { time: 'created_at', id: 'id' }, q);
};

/** Deletes a session and everything it holds. */
export const deleteSessionRows = async (ctx: Ctx, id: string) => {
  await exec(ctx).deleteFrom('context_blocks').where('org_id', '=', orgId(ctx)).where('session_id', '=', id).execute();
  await exec(ctx).deleteFrom('context_session_tags').where('org_id', '=', orgId(ctx)).where('session_id', '=', id).execute();
  return exec(ctx).deleteFrom('context_sessions').where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();
};

// ---- blocks ----------------------------------------------------------------------------------------------

export async function insertBlocks(ctx: Ctx, rows: Insertable<ContextBlocksTable>[]): Promise<void> {
  for (let i = 0; i < rows.length; i += CHUNK)
    await exec(ctx)
      .insertInto('context_blocks')
      .values(rows.slice(i, i + CHUNK))
      .execute();
}

/** Every block of a session, in context order. */
export const blockRows = (ctx: Ctx, sessionId: string) =>
  exec(ctx)
    .selectFrom('context_blocks')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('session_id', '=', sessionId)
    .orderBy('position')
    .execute();

/** Every block of a session without its content, in context order. */
export const blockMetas = (ctx: Ctx, sessionId: string): Promise<BlockMeta[]> =>
  exec(ctx)
    .selectFrom('context_blocks')
    .select(['id', 'position', 'kind', 'tags', 'pinned', 'tokens'])
    .where('org_id', '=', orgId(ctx))
    .where('session_id', '=', sessionId)
    .orderBy('position')
    .execute();

export const findBlock = (ctx: Ctx, sessionId: string, blockId: string) =>
  exec(ctx)
    .selectFrom('context_blocks')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('session_id', '=', sessionId)
    .where('id', '=', blockId)
    .executeTakeFirst();

/**
 * Up to `limit` blocks after `afterPosition`, in order, with the filters SQL can apply. `tagLike` is a superset
 * filter (SQLite's LIKE ignores ASCII case): the caller keeps the exact matches.
 */
export const blockSlice = (
  ctx: Ctx,
  sessionId: string,
  q: { afterPosition: number; limit: number; kind?: string; pinned?: boolean; tagLike?: string },
) => {
  let query = exec(ctx)
    .selectFrom('context_blocks')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('session_id', '=', sessionId)
    .where('position', '>', q.afterPosition);
  if (q.kind) query = query.where('kind', '=', q.kind);
  if (q.pinned !== undefined) query = query.where('pinned', '=', q.pinned ? 1 : 0);
  if (q.tagLike) query = query.where('tags', 'like', q.tagLike);
  return query.orderBy('position').limit(q.limit).execute();
};

export const updateBlockRow = (ctx: Ctx, sessionId: string, blockId: string, set: Updateable<ContextBlocksTable>) =>
  exec(ctx)
    .updateTable('context_blocks')
    .set(set)
    .where('org_id', '=', orgId(ctx))
    .where('session_id', '=', sessionId)
    .where('id', '=', blockId)
    .execute();

export async function deleteBlockRows(ctx: Ctx, sessionId: string, ids: readonly string[]): Promise<number> {
  let n = 0;
  for (let i = 0; i < ids.length; i += CHUNK) {
    const r = await exec(ctx)
      .deleteFrom('context_blocks')
      .where('org_id', '=', orgId(ctx))
      .where('session_id', '=', sessionId)
      .where('id', 'in', ids.slice(i, i + CHUNK))
      .executeTakeFirst();
    n += Number(r.numDeletedRows);
  }
  return n;
}

// ---- the session lease -------------------------------------------------------------------------------------

/** Takes the session's lease when it is free or lapsed; true when taken. */
export async function tryLease(ctx: Ctx, id: string, holder: string, now: string, until: string): Promise<boolean> {
  const r = await exec(ctx)
    .updateTable('context_sessions')
    .set({ lease_holder: holder, lease_until: until })
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .where((eb) => eb.or([eb('lease_until', 'is', null), eb('lease_until', '<', now)]))
    .executeTakeFirst();
  return Number(r.numUpdatedRows) === 1;
}

export const renewLease = (ctx: Ctx, id: string, holder: string, until: string) =>
  exec(ctx)
    .updateTable('context_sessions')
    .set({ lease_until: until })
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .where('lease_holder', '=', holder)
    .execute();

export const releaseLease = (ctx: Ctx, id: string, holder: string) =>
  exec(ctx)
    .updateTable('context_sessions')
    .set({ lease_holder: null, lease_until: null })
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .where('lease_holder', '=', holder)
    .execute();

export const leaseHolder = (ctx: Ctx, id: string) =>
  exec(ctx)
    .selectFrom('context_sessions')
    .select(['lease_holder', 'lease_until'])
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .executeTakeFirst();
