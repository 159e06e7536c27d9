import { exec, orgId, type Ctx } from '../../platform/context.js';

/** One message of a thread's conversation, as a model takes it back. */
export interface HistoryMessage {
  role: 'user' | 'assistant';
  text: string;
}

/**
 * A rollout's conversation for a model: its summary (when it was opened by compaction) and its user and
 * assistant messages in order. Scoped to the caller's organization: a thread of another organization reads as
 * empty. Other domains (runs) read thread history through this verb, never the tables.
 */
export async function threadHistory(
  ctx: Ctx,
  threadId: string,
  rolloutId: string | null,
): Promise<{ summary: string | null; messages: HistoryMessage[] }> {
  if (!rolloutId) return { summary: null, messages: [] };
  const db = exec(ctx);
  const rollout = await db
    .selectFrom('thread_rollouts as r')
    .innerJoin('threads as t', 't.id', 'r.thread_id')
    .select(['r.summary'])
    .where('r.id', '=', rolloutId)
    .where('r.thread_id', '=', threadId)
    .where('t.org_id', '=', orgId(ctx))
    .executeTakeFirst();
  if (!rollout) return { summary: null, messages: [] };
  const rows = await db
    .selectFrom('thread_events')
    .select(['type', 'payload'])
    .where('thread_id', '=', threadId)
    .where('rollout_id', '=', rolloutId)
    .where('type', 'in', ['user_message', 'assistant_message'])
    .orderBy('sequence')
    .execute();
  const messages: HistoryMessage[] = [];
  for (const r of rows) {
    const text = (JSON.parse(r.payload) as { text?: string }).text;
    if (text) messages.push({ role: r.type === 'user_message' ? 'user' : 'assistant', text });
  }
  return { summary: rollout.summary ?? null, messages };
}

/** The text of a run's last non-empty assistant message in its thread (its result), or null. Scoped to the caller's organization. */
export async function runFinalText(ctx: Ctx, threadId: string, runId: string): Promise<string | null> {
  const rows = await exec(ctx)
    .selectFrom('thread_events as e')
    .innerJoin('threads as t', 't.id', 'e.thread_id')
    .select(['e.payload'])
    .where('e.thread_id', '=', threadId)
    .where('t.org_id', '=', orgId(ctx))
    .where('e.run_id', '=', runId)
    .where('e.type', '=', 'assistant_message')
    .orderBy('e.sequence', 'desc')
    .limit(20)
    .execute();
  for (const r of rows) {
    const text = (JSON.parse(r.payload) as { text?: string }).text;
    if (text) return text;
  }
  return null;
}
