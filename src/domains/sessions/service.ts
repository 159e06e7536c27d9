/**
 * Context sessions (ADR 0031): a member's reusable, forkable memory of blocks. A session is its creator's: other
 * members (admins included) and other organizations get 404. Every write keeps the session's counters in step
 * with its blocks in the same transaction, holds the session's lease (lease.ts) and records its activity.
 */
import type { Insertable } from 'kysely';
import type { ContextBlocksTable } from '../../database.js';
import { orgId, requireScope, withTx, type Ctx } from '../../platform/context.js';
import { errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';
import { findAgentRow } from '../agents/index.js';
import { modelGateway, type ModelEntry } from '../models/index.js';
import { withLease } from './lease.js';
import {
  blockMetas,
  blockRows,
  bumpSession,
  deleteSessionRows,
  findSession,
  insertBlocks,
  insertSession,
  sessionPage,
  setSessionTags,
  updateSessionRow,
  type BlockRow,
  type SessionRow,
} from './repo.js';
import type { CreateSessionBody, Fork, ForkBody, Metrics, Session, SessionSummary, SessionsQuery, UpdateSessionBody } from './schemas.js';
import { encodingFor, tokenizer } from './tokens.js';

/** A session of the caller's own, else 404 (another member's and another organization's alike). */
export async function ownSession(ctx: Ctx, id: string): Promise<SessionRow> {
  const row = await findSession(ctx, id);
  if (!row || row.created_by_user_id !== ctx.principal.userId) throw errors.notFound('session', id);
  return row;
}

/** The model behind an agent slug, when the agent exists and has a catalogue model. */
export async function agentModel(ctx: Ctx, slug: string | null): Promise<{ agentModel: string | null; entry: ModelEntry | null }> {
  if (!slug) return { agentModel: null, entry: null };
  const agent = await findAgentRow(ctx, slug).catch(() => null);
  const id = agent?.model ?? null;
  return { agentModel: id, entry: id ? (modelGateway(ctx.deps).catalogue.find((m) => m.id === id) ?? null) : null };
}

/** The session's window: its default agent's model's context window, else the server's default. */
export async function windowOf(ctx: Ctx, defaultAgent: string | null): Promise<number> {
  const { entry } = await agentModel(ctx, defaultAgent);
  return entry?.contextWindow ?? ctx.deps.config.sessions.defaultMaxTokens;
}

export function metricsOf(row: SessionRow, maxTokens: number): Metrics {
  const free = maxTokens > 0 ? Math.max(0, (maxTokens - row.total_tokens) / maxTokens) : 0;
  return {
    totalTokens: row.total_tokens,
    maxTokens,
    tokensRemainingPct: Math.round(free * 1000) / 10,
    compactionCount: row.compaction_count,
    blockCount: row.block_count,
    invocationCount: row.invocation_count,
  };
}

function summaryOf(row: SessionRow, maxTokens: number): SessionSummary {
  return {
    id: row.id,
    name: row.name,
    defaultAgent: row.default_agent,
    tags: JSON.parse(row.tags) as string[],
    ...(row.forked_from ? { forkedFrom: row.forked_from } : {}),
    tokenizer: row.tokenizer,
    metrics: metricsOf(row, maxTokens),
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/** Which blocks a copy (a new session `fromSession`, a fork) takes. */
export interface CopyFilter {
  includeByTag?: readonly string[];
  excludeByTag?: readonly string[];
  includePinned: boolean;
  includeSummaries: boolean;
}

export function keepBlock(b: { tags: string; pinned: number; kind: string }, f: CopyFilter): boolean {
  const tags = JSON.parse(b.tags) as string[];
  if (f.excludeByTag?.length && tags.some((t) => f.excludeByTag!.includes(t))) return false;
  if (b.pinned) return f.includePinned;
  if (b.kind === 'summary' && !f.includeSummaries) return false;
  if (f.includeByTag?.length) return tags.some((t) => f.includeByTag!.includes(t));
  return true;
}

/** Copies of the chosen blocks of `source` for session `to`, renumbered in order, recounted when the tokenizer differs. */
async function copiedBlocks(ctx: Ctx, source: SessionRow, to: { id: string; tokenizer: string }, f: CopyFilter, at: string) {
  const rows = (await blockRows(ctx, source.id)).filter((b) => keepBlock(b, f));
  const tk = to.tokenizer === source.tokenizer ? null : await tokenizer(to.tokenizer);
  const copies: Insertable<ContextBlocksTable>[] = rows.map((b: BlockRow, i) => ({
    id: prefixedId('blk'),
    org_id: b.org_id,
    session_id: to.id,
    position: i,
    kind: b.kind,
    content: b.content,
    tags: b.tags,
    pinned: b.pinned,
    tokens: tk ? tk.count(b.content) : b.tokens,
    source: JSON.stringify({ ...(b.source ? (JSON.parse(b.source) as object) : {}), copiedFromSession: source.id, copiedFromBlock: b.id }),
    created_at: at,
    updated_at: at,
  }));
  return { copies, tokens: copies.reduce((n, b) => n + b.tokens, 0) };
}

/** Writes a new session with its tags and (copied) blocks, in the caller's transaction. */
async function insertNewSession(
  tx: Ctx,
  s: { id: string; name: string; defaultAgent: string | null; tags: readonly string[]; forkedFrom: string | null; tokenizer: string; at: string },
  copy: { copies: Insertable<ContextBlocksTable>[]; tokens: number },
): Promise<void> {
  const tags = [...new Set(s.tags)];
  await insertSession(tx, {
    id: s.id,
    org_id: orgId(tx),
    created_by_user_id: tx.principal.userId,
    name: s.name,
    default_agent: s.defaultAgent,
    tags: JSON.stringify(tags),
    forked_from: s.forkedFrom,
    tokenizer: s.tokenizer,
    total_tokens: copy.tokens,
    block_count: copy.copies.length,
    compaction_count: 0,
    invocation_count: 0,
    next_position: copy.copies.length,
    lease_holder: null,
    lease_until: null,
    created_at: s.at,
    updated_at: s.at,
  });
  await setSessionTags(tx, s.id, tags);
  await insertBlocks(tx, copy.copies);
}

/** POST /v1/aip/sessions: a new session, empty or with copies of another session's blocks. */
export async function createSession(ctx: Ctx, body: CreateSessionBody): Promise<Session> {
  requireScope(ctx, 'sessions:write');
  if (body.defaultAgent) await findAgentRow(ctx, body.defaultAgent); // 404 for an unknown agent
  const { entry } = await agentModel(ctx, body.defaultAgent ?? null);
  const maxTokens = entry?.contextWindow ?? ctx.deps.config.sessions.defaultMaxTokens;
  const source = body.fromSession ? await ownSession(ctx, body.fromSession) : null;
  const id = prefixedId('sess');
  const at = nowIso();
  const make = async () => {
    const tokenizerName = encodingFor(entry);
    const copy = source
      ? await copiedBlocks(
          ctx,
          source,
          { id, tokenizer: tokenizerName },
          { includeByTag: body.includeByTag, includePinned: body.includePinned, includeSummaries: true },
          at,
        )
      : { copies: [], tokens: 0 };
    await withTx(ctx, async (tx) => {
      await insertNewSession(
        tx,
        { id, name: body.name, defaultAgent: body.defaultAgent ?? null, tags: body.tags, forkedFrom: null, tokenizer: tokenizerName, at },
        copy,
      );
      await recordActivity(tx, {
        resourceType: 'context_session',
        resourceId: id,
        eventType: 'session.created',
        status: 'completed',
        title: `Session ${body.name} created`,
        metadata: { defaultAgent: body.defaultAgent ?? null, ...(source ? { fromSession: source.id, blocksCopied: copy.copies.length } : {}) },
      });
    });
  };
  // A copy reads its source under the source's lease: never half before and half after a compaction.
  if (source) await withLease(ctx, source.id, 'fork', make);
  else await make();
  return sessionView(ctx, (await findSession(ctx, id))!, maxTokens);
}

async function sessionView(ctx: Ctx, row: SessionRow, maxTokens?: number): Promise<Session> {
  const metas = await blockMetas(ctx, row.id);
  return {
    ...summaryOf(row, maxTokens ?? (await windowOf(ctx, row.default_agent))),
    blocks: metas.map((b) => b.id),
    pinnedBlocks: metas.filter((b) => b.pinned).map((b) => b.id),
  };
}

/** GET /v1/aip/sessions/{id}: the session with its block ids in context order and its pinned ones. */
export async function getSession(ctx: Ctx, id: string): Promise<Session> {
  requireScope(ctx, 'sessions:read');
  return sessionView(ctx, await ownSession(ctx, id));
}

/** GET /v1/aip/sessions: the caller's sessions, newest first. */
export async function listSessions(ctx: Ctx, q: SessionsQuery) {
  requireScope(ctx, 'sessions:read');
  const page = await sessionPage(ctx, ctx.principal.userId, q);
  const windows = new Map<string, number>();
  const items: SessionSummary[] = [];
  for (const row of page.items) {
    const key = row.default_agent ?? '';
    if (!windows.has(key)) windows.set(key, await windowOf(ctx, row.default_agent));
    items.push(summaryOf(row, windows.get(key)!));
  }
  return { items, hasMore: page.hasMore, nextCursor: page.nextCursor };
}

/** PATCH /v1/aip/sessions/{id}: its name and tags. */
export async function updateSession(ctx: Ctx, id: string, body: UpdateSessionBody): Promise<Session> {
  requireScope(ctx, 'sessions:write');
  const row = await ownSession(ctx, id);
  const at = nowIso();
  await withTx(ctx, async (tx) => {
    await updateSessionRow(tx, id, {
      ...(body.name !== undefined ? { name: body.name } : {}),
      ...(body.tags !== undefined ? { tags: JSON.stringify([...new Set(body.tags)]) } : {}),
      updated_at: at,
    });
    if (body.tags !== undefined) await setSessionTags(tx, id, body.tags);
    await recordActivity(tx, {
      resourceType: 'context_session',
      resourceId: id,
      eventType: 'session.updated',
      status: 'completed',
      title: `Session ${body.name ?? row.name} changed`,
      metadata: { changed: Object.keys(body) },
    });
  });
  return getSession(ctx, id);
}

/** DELETE /v1/aip/sessions/{id}: the session and all its blocks (after a run using it ends). */
export async function deleteSession(ctx: Ctx, id: string): Promise<{ deleted: true }> {
  requireScope(ctx, 'sessions:write');
  const row = await ownSession(ctx, id);
  await withLease(ctx, id, 'delete', () =>
    withTx(ctx, async (tx) => {
      await deleteSessionRows(tx, id);
      await recordActivity(tx, {
        resourceType: 'context_session',
        resourceId: id,
        eventType: 'session.deleted',
        status: 'completed',
        title: `Session ${row.name} deleted`,
        metadata: { blocks: row.block_count, tokens: row.total_tokens },
      });
    }),
  ).catch((err) => {
    // Deleted by another request while this one waited: gone either way.
    if ((err as { code?: string }).code === 'not_found') return;
    throw err;
  });
  return { deleted: true };
}

/** POST /v1/aip/sessions/{id}/fork: a new session with copies of the chosen blocks; the original is untouched. */
export async function forkSession(ctx: Ctx, id: string, body: ForkBody): Promise<Fork> {
  requireScope(ctx, 'sessions:write');
  const source = await ownSession(ctx, id);
  const forkId = prefixedId('sess');
  const at = nowIso();
  await withLease(ctx, id, 'fork', async () => {
    const fresh = (await findSession(ctx, id))!;
    const copy = await copiedBlocks(ctx, fresh, { id: forkId, tokenizer: fresh.tokenizer }, body, at);
    await withTx(ctx, async (tx) => {
      await insertNewSession(
        tx,
        {
          id: forkId,
          name: body.name,
          defaultAgent: fresh.default_agent,
          tags: JSON.parse(fresh.tags) as string[],
          forkedFrom: fresh.id,
          tokenizer: fresh.tokenizer,
          at,
        },
        copy,
      );
      await recordActivity(tx, {
        resourceType: 'context_session',
        resourceId: forkId,
        eventType: 'session.forked',
        status: 'completed',
        title: `Session ${source.name} forked as ${body.name}`,
        metadata: { forkedFrom: id, blocksCopied: copy.copies.length, tokens: copy.tokens },
      });
    });
  });
  const row = (await findSession(ctx, forkId))!;
  return { id: row.id, name: row.name, forkedFrom: id, metrics: metricsOf(row, await windowOf(ctx, row.default_agent)), createdAt: row.created_at };
}

export { bumpSession };
