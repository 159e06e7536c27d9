/**
 * Compaction: older blocks become summary blocks until the session fits a token target. Pinned blocks (unless
 * `preservePinned` is false) and the most recent `preserveRecent` of the others stay as they are; of the rest,
 * the oldest are compacted, just enough of them that their summaries (about SUMMARY_RATIO of what they replace)
 * bring the session to the target. Each summary replaces about CHUNK_TOKENS of them and takes the first one's
 * place in the order.
 */
import type { Insertable } from 'kysely';
import type { ContextBlocksTable } from '../../database.js';
import { orgId, requireScope, withTx, type Ctx } from '../../platform/context.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';
import { resolveModel } from '../models/index.js';
import { withLease } from './lease.js';
import { blockMetas, blockRows, bumpSession, deleteBlockRows, findSession, insertBlocks, type BlockMeta } from './repo.js';
import type { CompactBody, Compaction } from './schemas.js';
import { agentModel, ownSession, windowOf } from './service.js';
import { extractiveSummary, modelSummary } from './summarize.js';
import { tokenizer } from './tokens.js';

/** A summary is written in about this share of the tokens it replaces. */
const SUMMARY_RATIO = 0.1;
/** The smallest summary worth writing. */
export const MIN_SUMMARY_TOKENS = 16;
/** Source tokens per summary (one model call each). */
const CHUNK_TOKENS = 8000;

export interface CompactionPlan {
  total: number;
  /** The smallest target reachable: the preserved blocks plus one minimal summary. */
  minimum: number;
  /** Runs of consecutive blocks to replace, each with its summary's token budget. */
  groups: { blocks: BlockMeta[]; budget: number }[];
}

/** What to compact to reach `target`; `groups` is empty when the session already fits. */
export function planCompaction(metas: readonly BlockMeta[], o: { target: number; preservePinned: boolean; preserveRecent: number }): CompactionPlan {
  const total = metas.reduce((n, b) => n + b.tokens, 0);
  const others = metas.filter((b) => !(o.preservePinned && b.pinned));
  const compactable = others.slice(0, Math.max(0, others.length - o.preserveRecent));
  const compactableTokens = compactable.reduce((n, b) => n + b.tokens, 0);
  const minimum = total - compactableTokens + (compactable.length ? MIN_SUMMARY_TOKENS : 0);
  if (total <= o.target || o.target < minimum) return { total, minimum, groups: [] };
  const need = total - o.target;
  // The fewest oldest blocks whose summaries free `need` tokens; all of them (with a larger summary) otherwise.
  let k = 0;
  let taken = 0;
  // (Enough that the summary keeps at least MIN_SUMMARY_TOKENS: the minimum check guarantees all of them do.)
  while (k < compactable.length && (taken * (1 - SUMMARY_RATIO) < need || taken - need < MIN_SUMMARY_TOKENS)) taken += compactable[k++]!.tokens;
  const budget = Math.min(taken - need, Math.max(MIN_SUMMARY_TOKENS, Math.ceil(taken * SUMMARY_RATIO)));
  const chosen = compactable.slice(0, k);
  // Chunks of at least chunkTokens (the last one merged into the one before when under half of that), so each
  // summary gets a fair share of the budget. A summary takes the place of its first block: older material moves
  // ahead of a pinned block that sat between, never after a block that stays.
  const maxChunks = Math.max(1, Math.floor(budget / MIN_SUMMARY_TOKENS));
  const chunkTokens = Math.max(CHUNK_TOKENS, Math.ceil(taken / maxChunks));
  const chunks: { blocks: BlockMeta[]; tokens: number }[] = [];
  let current = { blocks: [] as BlockMeta[], tokens: 0 };
  for (const b of chosen) {
    current.blocks.push(b);
    current.tokens += b.tokens;
    if (current.tokens >= chunkTokens) {
      chunks.push(current);
      current = { blocks: [], tokens: 0 };
    }
  }
  if (current.blocks.length) {
    const last = chunks[chunks.length - 1];
    if (last && current.tokens < chunkTokens / 2) {
      last.blocks.push(...current.blocks);
      last.tokens += current.tokens;
    } else chunks.push(current);
  }
  // The budget shared by source tokens (floors: the sum stays within it), each at least one token.
  const groups = chunks.map((c) => ({ blocks: c.blocks, budget: Math.max(1, Math.floor((budget * c.tokens) / Math.max(1, taken))) }));
  return { total, minimum, groups };
}

export type Summarizer = CompactBody['summarizer'];

/**
 * Compacts a session whose lease the caller holds (the route's verb, or a run about to use it). Answers the
 * tokens before and after; a target below what the preserved blocks need is a 400 naming the minimum.
 */
export async function compactHeld(
  ctx: Ctx,
  sessionId: string,
  opts: { targetTokens?: number; preservePinned: boolean; preserveRecent: number; summarizer: Summarizer; reason: 'request' | 'run'; runId?: string },
): Promise<Compaction> {
  const session = await findSession(ctx, sessionId);
  if (!session) throw errors.notFound('session', sessionId);
  const target = opts.targetTokens ?? Math.floor((await windowOf(ctx, session.default_agent)) / 2);
  const metas = await blockMetas(ctx, sessionId);
  const plan = planCompaction(metas, { target, preservePinned: opts.preservePinned, preserveRecent: opts.preserveRecent });
  if (plan.total <= target) return { previousTokens: plan.total, newTokens: plan.total, blocksCompacted: 0, summariesCreated: 0, summarizer: 'none' };
  if (!plan.groups.length) {
    throw new AppError(
      'invalid_request',
      `targetTokens: ${target} is below what the preserved blocks need; the smallest target is ${plan.minimum} (pinned and the ${opts.preserveRecent} most recent blocks, plus a summary)`,
      { issues: [{ path: 'targetTokens', message: `must be at least ${plan.minimum}` }], minimumTokens: plan.minimum },
    );
  }
  const model = await chooseModel(ctx, session.default_agent, opts.summarizer);
  const tk = await tokenizer(session.tokenizer);
  const chosen = new Set(plan.groups.flatMap((g) => g.blocks.map((b) => b.id)));
  const contents = new Map((await blockRows(ctx, sessionId)).filter((b) => chosen.has(b.id)).map((b) => [b.id, b]));
  const window = model?.window ?? ctx.deps.config.sessions.defaultMaxTokens;
  const at = nowIso();
  const summaries: Insertable<ContextBlocksTable>[] = [];
  let usedModel = false;
  for (const g of plan.groups) {
    const rows = g.blocks.map((b) => contents.get(b.id)!);
    let text = model
      ? await modelSummary(ctx, model.id, rows, { budget: g.budget, inputTokens: Math.floor(window * 0.7), tk, runId: opts.runId })
      : '';
    const by = text ? 'model' : 'extractive';
    if (text) usedModel = true;
    else text = extractiveSummary(rows, g.budget, tk);
    const tags = [...new Set(rows.flatMap((r) => JSON.parse(r.tags) as string[]))].slice(0, 50);
    summaries.push({
      id: prefixedId('blk'),
      org_id: orgId(ctx),
      session_id: sessionId,
      position: rows[0]!.position,
      kind: 'summary',
      content: text,
      tags: JSON.stringify(tags),
      pinned: 0,
      tokens: tk.count(text),
      source: JSON.stringify({
        summarizer: by,
        ...(by === 'model' ? { model: model!.id } : {}),
        summaryOf: rows.length,
        firstBlock: rows[0]!.id,
        lastBlock: rows[rows.length - 1]!.id,
        replacedTokens: rows.reduce((n, r) => n + r.tokens, 0),
      }),
      created_at: at,
      updated_at: at,
    });
  }
  const removed = [...chosen];
  const removedTokens = plan.groups.reduce((n, g) => n + g.blocks.reduce((m, b) => m + b.tokens, 0), 0);
  const addedTokens = summaries.reduce((n, s) => n + s.tokens, 0);
  const result: Compaction = {
    previousTokens: plan.total,
    newTokens: plan.total - removedTokens + addedTokens,
    blocksCompacted: removed.length,
    summariesCreated: summaries.length,
    summarizer: usedModel ? 'model' : 'extractive',
  };
  await withTx(ctx, async (tx) => {
    await deleteBlockRows(tx, sessionId, removed);
    await insertBlocks(tx, summaries);
    await bumpSession(tx, sessionId, { tokens: addedTokens - removedTokens, blocks: summaries.length - removed.length, compactions: 1, at });
    await recordActivity(tx, {
      resourceType: 'context_session',
      resourceId: sessionId,
      agentRunId: opts.runId,
      eventType: 'session.compacted',
      status: 'completed',
      title: `Session ${session.name} compacted from ${result.previousTokens} to ${result.newTokens} tokens`,
      metadata: { ...result, targetTokens: target, reason: opts.reason },
    });
  });
  return result;
}

/** The model that writes summaries: the default agent's, when asked for or (auto) when it can be used. */
async function chooseModel(ctx: Ctx, defaultAgent: string | null, summarizer: Summarizer): Promise<{ id: string; window: number } | null> {
  if (summarizer === 'extractive') return null;
  const { agentModel: id, entry } = await agentModel(ctx, defaultAgent);
  if (!id) {
    if (summarizer === 'model') throw errors.invalidField('summarizer', 'the session has no default agent with a model; use "extractive" or "auto"');
    return null;
  }
  if (summarizer === 'auto') {
    // Usable: known to the catalogue, served here, its key (BYOK) present. A call that then fails is an error.
    const usable = await resolveModel(ctx, id).then(
      () => true,
      () => false,
    );
    if (!usable) return null;
  }
  return { id, window: entry?.contextWindow ?? ctx.deps.config.sessions.defaultMaxTokens };
}

/** POST /v1/aip/sessions/{id}/compact. */
export async function compactSession(ctx: Ctx, sessionId: string, body: CompactBody): Promise<Compaction> {
  requireScope(ctx, 'sessions:write');
  await ownSession(ctx, sessionId);
  return withLease(ctx, sessionId, 'compaction', () => compactHeld(ctx, sessionId, { ...body, reason: 'request' }));
}
