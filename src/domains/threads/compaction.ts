/**
 * Compaction: closes a thread's active rollout and opens a new one that starts with a summary of it
 * (a model's, or the extractive one here).
 */
import { exec, requireScope, type Ctx } from '../../platform/context.js';
import { prefixedId } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';
import { appendDurable } from './durable.js';
import type { DurablePayload, ThreadEvent } from './frames.js';
import { acquireRunLock, releaseRunLock, threadBusy } from './locks.js';
import type { Rollout, Thread } from './schemas.js';
import { listRollouts, ownThread, toEvent, toThread } from './service.js';

const SUMMARY_CHARS = 4000;

/** A deterministic summary of a rollout: its first user message, then its latest messages, newest last. */
export function extractiveSummary(events: ThreadEvent[]): string {
  const text = (e: ThreadEvent): string | null => {
    const p = e.payload as { text?: unknown; content?: unknown } | null;
    const value = typeof p?.text === 'string' ? p.text : typeof p?.content === 'string' ? p.content : null;
    return value?.replace(/\s+/g, ' ').trim() || null;
  };
  const messages = events
    .filter((e) => e.type === 'user_message' || e.type === 'assistant_message' || e.type === 'compaction_completed')
    .map((e) => ({
      who: e.type === 'user_message' ? 'User' : e.type === 'assistant_message' ? 'Assistant' : 'Earlier',
      text: e.type === 'compaction_completed' ? ((e.payload as { summary?: string }).summary ?? null) : text(e),
    }))
    .filter((m): m is { who: string; text: string } => !!m.text);
  const tools = events.filter((e) => e.type === 'tool_call').length;
  const head = `Summary of ${events.length} earlier event${events.length === 1 ? '' : 's'} (${messages.length} message${messages.length === 1 ? '' : 's'}, ${tools} tool call${tools === 1 ? '' : 's'}).`;
  if (!messages.length) return head;
  const clip = (s: string, n: number) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);
  const lines: string[] = [];
  const first = messages[0]!;
  lines.push(`${first.who}: ${clip(first.text, 600)}`);
  let budget = SUMMARY_CHARS - head.length - lines[0]!.length;
  const recent: string[] = [];
  for (const m of messages.slice(1).reverse()) {
    const line = `${m.who}: ${clip(m.text, 400)}`;
    if (line.length + 1 > budget) break;
    recent.unshift(line);
    budget -= line.length + 1;
  }
  if (recent.length < messages.length - 1) lines.push('…');
  return [head, ...lines, ...recent].join('\n');
}

/**
 * Compacts a thread: `compaction_started` closes the active rollout, a new rollout opens with a summary of
 * it, and `compaction_completed` (its first event, carrying the summary) makes it the active one. Refused
 * with 409 THREAD_BUSY while a run is active. The summary is extractive until a model summarizer is given.
 */
export async function compactThread(
  ctx: Ctx,
  id: string,
  body: { reason?: string },
  summarize?: (events: ThreadEvent[]) => Promise<{ summary: string; model: string } | null>,
): Promise<{ thread: Thread; rollout: Rollout; events: ThreadEvent[] }> {
  requireScope(ctx, 'agent:run');
  const owned = await ownThread(ctx, id, 'compact it');
  const runId = prefixedId('cmp');
  const lock = await acquireRunLock(ctx.deps, id, runId);
  if (!lock.acquired) throw threadBusy(lock.activeRunId);
  try {
    // Read again under the lock: a compaction that ended meanwhile moved the active rollout.
    const row = (await exec(ctx).selectFrom('threads').selectAll().where('id', '=', owned.id).executeTakeFirst()) ?? owned;
    const from = row.active_rollout_id!;
    const started = await appendDurable(ctx.deps, id, [
      { type: 'compaction_started', payload: { fromRolloutId: from, reason: body.reason ?? null }, rolloutId: from },
    ]);
    const previous = (
      await ctx.deps.db.kysely
        .selectFrom('thread_events')
        .selectAll()
        .where('thread_id', '=', id)
        .where('rollout_id', '=', from)
        .orderBy('sequence')
        .execute()
    ).map(toEvent);
    const byModel = summarize ? await summarize(previous).catch(() => null) : null;
    const summary = byModel?.summary ?? extractiveSummary(previous.filter((e) => e.type !== 'compaction_started'));
    const method: DurablePayload<'compaction_completed'>['summaryMethod'] = byModel ? 'model' : 'extractive';
    const position = (
      await ctx.deps.db.kysely
        .selectFrom('thread_rollouts')
        .select((eb) => eb.fn.max('position').as('p'))
        .where('thread_id', '=', id)
        .executeTakeFirst()
    )?.p;
    const rolloutId = prefixedId('rol');
    const payload = {
      rolloutId,
      fromRolloutId: from,
      position: Number(position ?? 0) + 1,
      summary,
      summaryMethod: method,
      summaryModel: byModel?.model ?? null,
    };
    const completed = await appendDurable(ctx.deps, id, [{ type: 'compaction_completed', payload, rolloutId }], {
      extra: async (trx, events) => {
        await trx.updateTable('thread_rollouts').set({ status: 'closed', closed_at: events[0]!.createdAt }).where('id', '=', from).execute();
        await trx
          .insertInto('thread_rollouts')
          .values({
            id: rolloutId,
            thread_id: id,
            position: payload.position,
            kind: 'compaction',
            status: 'active',
            from_rollout_id: from,
            summary,
            summary_method: method,
            summary_model: payload.summaryModel,
            created_at: events[0]!.createdAt,
            closed_at: null,
          })
          // Already there when the append had to project from the JSONL (durable.ts), which recreates it.
          .onConflict((oc) => oc.column('id').doNothing())
          .execute();
        await trx.updateTable('threads').set({ active_rollout_id: rolloutId }).where('id', '=', id).execute();
        await recordActivity(
          { ...ctx, trx },
          {
            resourceType: 'thread',
            resourceId: id,
            threadId: id,
            eventType: 'thread.compacted',
            status: 'completed',
            title: 'Thread compacted',
            metadata: { fromRolloutId: from, rolloutId, summaryMethod: method, events: previous.length },
          },
          row.org_id,
        );
      },
    });
    const fresh = await exec(ctx).selectFrom('threads').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    const rollout = (await listRollouts(ctx, id)).find((r) => r.id === rolloutId)!;
    return { thread: toThread(fresh), rollout, events: [...started, ...completed] };
  } finally {
    await releaseRunLock(ctx.deps, id, runId);
  }
}
