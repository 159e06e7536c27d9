/** A session's blocks: add (one or a batch), list, get, change (content, tags, pin), delete. */
import type { Insertable } from 'kysely';
import type { ContextBlocksTable } from '../../database.js';
import { requireScope, withTx, orgId, type Ctx } from '../../platform/context.js';
import { errors } from '../../platform/http/errors.js';
import { decodeCursor, encodeCursor } from '../../platform/http/pagination.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';
import { withLease } from './lease.js';
import { blockSlice, bumpSession, deleteBlockRows, findBlock, findSession, insertBlocks, updateBlockRow, type BlockRow } from './repo.js';
import type { Block, BlockInput, BlocksQuery, UpdateBlockBody } from './schemas.js';
import { ownSession } from './service.js';
import { tokenizer } from './tokens.js';

export function toBlock(row: BlockRow): Block {
  return {
    id: row.id,
    sessionId: row.session_id,
    kind: row.kind as Block['kind'],
    content: row.content,
    tags: JSON.parse(row.tags) as string[],
    pinned: row.pinned === 1,
    tokens: row.tokens,
    source: row.source ? (JSON.parse(row.source) as Record<string, unknown>) : null,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

function checkSize(ctx: Ctx, content: string, field: string): void {
  const max = ctx.deps.config.sessions.maxBlockBytes;
  const bytes = Buffer.byteLength(content, 'utf8');
  if (bytes > max) throw errors.tooLarge(`${field} is ${bytes} bytes; a block holds at most ${max} (HANGAR_SESSIONS_MAX_BLOCK_BYTES)`);
}

export interface NewBlock extends BlockInput {
  /** Set by the platform (a run's answer): not a client field. */
  platformSource?: Record<string, unknown>;
}

/**
 * Appends blocks to a session the caller holds the lease of (or in `tx` of a caller that does): counted,
 * inserted in order after its last block, its counters moved in the same transaction. Answers the rows.
 */
export async function appendBlocks(tx: Ctx, sessionId: string, blocks: readonly NewBlock[], encoding: string): Promise<BlockRow[]> {
  const session = await findSession(tx, sessionId);
  if (!session) throw errors.notFound('session', sessionId);
  const max = tx.deps.config.sessions.maxBlocks;
  if (session.block_count + blocks.length > max)
    throw errors.quotaExceeded(
      `session ${sessionId} holds ${session.block_count} blocks; at most ${max} fit (HANGAR_SESSIONS_MAX_BLOCKS): compact it or fork it`,
    );
  const tk = await tokenizer(encoding);
  const at = nowIso();
  const rows: Insertable<ContextBlocksTable>[] = blocks.map((b, i) => ({
    id: prefixedId('blk'),
    org_id: orgId(tx),
    session_id: sessionId,
    position: session.next_position + i,
    kind: b.kind,
    content: b.content,
    tags: JSON.stringify([...new Set(b.tags)]),
    pinned: b.pinned ? 1 : 0,
    tokens: tk.count(b.content),
    source: b.platformSource || b.source ? JSON.stringify({ ...b.source, ...b.platformSource }) : null,
    created_at: at,
    updated_at: at,
  }));
  await insertBlocks(tx, rows);
  await bumpSession(tx, sessionId, { tokens: rows.reduce((n, r) => n + r.tokens, 0), blocks: rows.length, positions: rows.length, at });
  return rows as BlockRow[];
}

/** POST …/blocks and …/blocks/batch: blocks added at the end of the session. */
export async function addBlocks(ctx: Ctx, sessionId: string, blocks: readonly BlockInput[]): Promise<Block[]> {
  requireScope(ctx, 'sessions:write');
  const session = await ownSession(ctx, sessionId);
  for (const [i, b] of blocks.entries()) checkSize(ctx, b.content, blocks.length === 1 ? 'content' : `blocks[${i}].content`);
  const rows = await withLease(ctx, sessionId, 'write', () =>
    withTx(ctx, async (tx) => {
      const added = await appendBlocks(tx, sessionId, blocks, session.tokenizer);
      const tokens = added.reduce((n, r) => n + r.tokens, 0);
      await recordActivity(tx, {
        resourceType: 'context_session',
        resourceId: sessionId,
        eventType: 'session.blocks.added',
        status: 'completed',
        title: `${added.length} block${added.length === 1 ? '' : 's'} added to session ${session.name}`,
        metadata: { count: added.length, tokens, pinned: added.filter((r) => r.pinned).length, blockIds: added.slice(0, 20).map((r) => r.id) },
      });
      return added;
    }),
  );
  return rows.map(toBlock);
}

/** GET …/blocks: in context order, filtered by tag, kind and pinned. */
export async function listBlocks(ctx: Ctx, sessionId: string, q: BlocksQuery) {
  requireScope(ctx, 'sessions:read');
  await ownSession(ctx, sessionId);
  let after = -1;
  if (q.cursor) {
    const [p] = decodeCursor(q.cursor, 1);
    if (typeof p !== 'number') throw errors.invalidField('cursor', 'is not a cursor this endpoint issued');
    after = p;
  }
  const items: BlockRow[] = [];
  // The tag filter is a LIKE superset in SQL (tags hold no quotes), kept exact here; slices until the page is full.
  const tagLike = q.tag ? `%${JSON.stringify(q.tag)}%` : undefined;
  let more = true;
  while (items.length <= q.limit && more) {
    const want = q.limit + 1 - items.length;
    const slice = await blockSlice(ctx, sessionId, { afterPosition: after, limit: want, kind: q.kind, pinned: q.pinned, tagLike });
    more = slice.length === want;
    for (const r of slice) {
      after = r.position;
      if (!q.tag || (JSON.parse(r.tags) as string[]).includes(q.tag)) items.push(r);
    }
  }
  const hasMore = items.length > q.limit;
  const page = items.slice(0, q.limit);
  return { items: page.map(toBlock), hasMore, nextCursor: hasMore ? encodeCursor([page[page.length - 1]!.position]) : null };
}

async function ownBlock(ctx: Ctx, sessionId: string, blockId: string): Promise<BlockRow> {
  const row = await findBlock(ctx, sessionId, blockId);
  if (!row) throw errors.notFound('block', blockId);
  return row;
}

export async function getBlock(ctx: Ctx, sessionId: string, blockId: string): Promise<Block> {
  requireScope(ctx, 'sessions:read');
  await ownSession(ctx, sessionId);
  return toBlock(await ownBlock(ctx, sessionId, blockId));
}

/** PATCH …/blocks/{id}: content (recounted), tags, pinned, kind. */
export async function updateBlock(ctx: Ctx, sessionId: string, blockId: string, body: UpdateBlockBody): Promise<Block> {
  requireScope(ctx, 'sessions:write');
  const session = await ownSession(ctx, sessionId);
  await ownBlock(ctx, sessionId, blockId);
  if (body.content !== undefined) checkSize(ctx, body.content, 'content');
  const tokens = body.content !== undefined ? (await tokenizer(session.tokenizer)).count(body.content) : null;
  await withLease(ctx, sessionId, 'write', () =>
    withTx(ctx, async (tx) => {
      const before = await ownBlock(tx, sessionId, blockId);
      const at = nowIso();
      await updateBlockRow(tx, sessionId, blockId, {
        ...(body.content !== undefined ? { content: body.content, tokens: tokens! } : {}),
        ...(body.tags !== undefined ? { tags: JSON.stringify([...new Set(body.tags)]) } : {}),
        ...(body.pinned !== undefined ? { pinned: body.pinned ? 1 : 0 } : {}),
        ...(body.kind !== undefined ? { kind: body.kind } : {}),
        updated_at: at,
      });
      await bumpSession(tx, sessionId, { tokens: tokens === null ? 0 : tokens - before.tokens, at });
      const pin = body.pinned === undefined || body.pinned === (before.pinned === 1) ? null : body.pinned ? 'pinned' : 'unpinned';
      await recordActivity(tx, {
        resourceType: 'context_session',
        resourceId: sessionId,
        eventType: pin ? `session.block.${pin}` : 'session.block.updated',
        status: 'completed',
        title: `Block ${blockId} ${pin ?? 'changed'}`,
        metadata: { blockId, changed: Object.keys(body), ...(tokens !== null ? { tokens, previousTokens: before.tokens } : {}) },
      });
    }),
  );
  return toBlock(await ownBlock(ctx, sessionId, blockId));
}

/** DELETE …/blocks/{id}. */
export async function deleteBlock(ctx: Ctx, sessionId: string, blockId: string): Promise<{ deleted: true }> {
  requireScope(ctx, 'sessions:write');
  await ownSession(ctx, sessionId);
  await ownBlock(ctx, sessionId, blockId);
  await withLease(ctx, sessionId, 'write', () =>
    withTx(ctx, async (tx) => {
      const before = await ownBlock(tx, sessionId, blockId);
      await deleteBlockRows(tx, sessionId, [blockId]);
      await bumpSession(tx, sessionId, { tokens: -before.tokens, blocks: -1, at: nowIso() });
      await recordActivity(tx, {
        resourceType: 'context_session',
        resourceId: sessionId,
        eventType: 'session.block.deleted',
        status: 'completed',
        title: `Block ${blockId} deleted`,
        metadata: { blockId, tokens: before.tokens, kind: before.kind },
      });
    }),
  );
  return { deleted: true };
}
