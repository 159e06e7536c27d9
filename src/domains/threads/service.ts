/**
 * The thread verbs: create, read, list, rename/archive and delete a thread, list its rollouts and events, and
 * publish transient frames. Durable frames are written in durable.ts, the run lock is in locks.ts and
 * compaction in compaction.ts.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { type Selectable, sql } from 'kysely';
import type { Database, ThreadRolloutsTable, ThreadsTable } from '../../database.js';
import { exec, isOrgAdmin, orgId, requireAnyScope, requireScope, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { decodeCursor, encodeCursor } from '../../platform/http/pagination.js';
import { newestFirstPage } from '../../platform/db/pages.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';
import { inTurn, lockThreadRow, publishFrame } from './durable.js';
import { subscribeParsed } from '../../platform/bus/index.js';
import { BusFrame, jsonlKey, ThreadEvent, threadChannel, TransientFrame, type DurableFrame, type MetadataFrame } from './frames.js';
import { activeRun, threadBusy } from './locks.js';
import { DEVICE_DURABLE_TYPES, type Rollout, type Thread, type ThreadEventFrame, type ThreadEventsResult } from './schemas.js';
import { stateKey } from '../../platform/state.js';

type Row = Selectable<ThreadsTable>;
type RolloutRow = Selectable<ThreadRolloutsTable>;

// ---- records and access ----------------------------------------------------------------------

export function toThread(row: Row): Thread {
  return {
    id: row.id,
    orgId: row.org_id,
    ownerUserId: row.owner_user_id,
    agentId: row.agent_id,
    title: row.title,
    executionMode: row.execution_mode as Thread['executionMode'],
    archived: row.archived === 1,
    activeRolloutId: row.active_rollout_id,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/** How the caller sees a thread: its owner sees everything; an organization admin sees its metadata only. */
export type View = 'owner' | 'metadata';

export async function findThread(ctx: Ctx, id: string): Promise<{ row: Row; view: View }> {
  const row = await exec(ctx).selectFrom('threads').selectAll().where('id', '=', id).where('org_id', '=', orgId(ctx)).executeTakeFirst();
  if (!row) throw errors.notFound('thread', id);
  if (row.owner_user_id === ctx.principal.userId) return { row, view: 'owner' };
  if (isOrgAdmin(ctx)) return { row, view: 'metadata' };
  throw errors.notFound('thread', id); // another member's thread does not exist for this caller
}

export async function ownThread(ctx: Ctx, id: string, action: string): Promise<Row> {
  const { row, view } = await findThread(ctx, id);
  if (view !== 'owner') throw errors.forbidden(`only the thread’s owner can ${action}; organization admins see its metadata`);
  return row;
}

export async function canSeeThread(ctx: Ctx, id: string): Promise<boolean> {
  try {
    await findThread(ctx, id);
    return true;
  } catch {
    return false;
  }
}

export async function createThread(
  ctx: Ctx,
  input: { title?: string; executionMode: string; agentId?: string; metadata?: Record<string, string> },
): Promise<Thread> {
  requireScope(ctx, 'agent:run');
  const now = nowIso();
  const id = prefixedId('thr');
  const rolloutId = prefixedId('rol');
  const row: Row = {
    id,
    org_id: orgId(ctx),
    owner_user_id: ctx.principal.userId,
    agent_id: input.agentId ?? null,
    title: input.title ?? null,
    execution_mode: input.executionMode,
    archived: 0,
    active_rollout_id: rolloutId,
    metadata: JSON.stringify(input.metadata ?? {}),
    last_sequence: 0,
    jsonl_bytes: 0,
    created_at: now,
    updated_at: now,
  };
  await withTx(ctx, async (tx) => {
    await exec(tx).insertInto('threads').values(row).execute();
    await exec(tx)
      .insertInto('thread_rollouts')
      .values({
        id: rolloutId,
        thread_id: id,
        position: 0,
        kind: 'initial',
        status: 'active',
        from_rollout_id: null,
        summary: null,
        summary_method: null,
        summary_model: null,
        created_at: now,
        closed_at: null,
      })
      .execute();
  });
  return toThread(row);
}

/** A thread as its owner or an admin sees it: GET /v1/threads/{id} (agent:read) and its activity (activity:read). */
export async function getThread(ctx: Ctx, id: string): Promise<{ thread: Thread; view: View; row: Row }> {
  requireAnyScope(ctx, ['agent:read', 'activity:read']);
  const { row, view } = await findThread(ctx, id);
  return { thread: toThread(row), view, row };
}

export async function listThreads(ctx: Ctx, q: { limit: number; cursor?: string; archived: boolean; q?: string }) {
  requireScope(ctx, 'agent:read');
  let query = exec(ctx).selectFrom('threads').selectAll().where('org_id', '=', orgId(ctx)).where('owner_user_id', '=', ctx.principal.userId);
  if (!q.archived) query = query.where('archived', '=', 0);
  if (q.q) {
    // LIKE with its wildcards escaped, on lower() of both sides: the same answer on SQLite and PostgreSQL.
    const pattern = `%${q.q.toLowerCase().replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
    const text = q.q;
    query = query.where((eb) => eb.or([sql<boolean>`lower(coalesce(title, '')) like ${pattern} escape '\\'`, eb('id', '=', text)]));
  }
  const page = await newestFirstPage(query, { time: 'updated_at', id: 'id' }, q);
  return { ...page, items: page.items.map(toThread) };
}

export async function listRollouts(ctx: Ctx, id: string): Promise<Rollout[]> {
  requireScope(ctx, 'agent:read');
  const row = await ownThread(ctx, id, 'read its rollouts');
  const rollouts = await exec(ctx).selectFrom('thread_rollouts').selectAll().where('thread_id', '=', row.id).orderBy('position').execute();
  const stats = await exec(ctx)
    .selectFrom('thread_events')
    .select([
      'rollout_id',
      (eb) => eb.fn.countAll<number>().as('n'),
      (eb) => eb.fn.min('sequence').as('first'),
      (eb) => eb.fn.max('sequence').as('last'),
    ])
    .where('thread_id', '=', row.id)
    .groupBy('rollout_id')
    .execute();
  const byId = new Map(stats.map((s) => [s.rollout_id, s]));
  return rollouts.map((r) => toRollout(r, byId.get(r.id)));
}

function toRollout(r: RolloutRow, s?: { n: number | string; first: unknown; last: unknown }): Rollout {
  return {
    id: r.id,
    threadId: r.thread_id,
    position: r.position,
    kind: r.kind,
    status: r.status,
    fromRolloutId: r.from_rollout_id,
    summary: r.summary,
    summaryMethod: r.summary_method,
    summaryModel: r.summary_model,
    eventCount: Number(s?.n ?? 0),
    firstSequence: s?.first == null ? null : Number(s.first),
    lastSequence: s?.last == null ? null : Number(s.last),
    createdAt: r.created_at,
    closedAt: r.closed_at,
  };
}

/** A projected event as the spec's ThreadEvent; its `type` is checked against the catalogue, its payload is as written. */
export function toEvent(r: Selectable<Database['thread_events']>): ThreadEvent {
  return ThreadEvent.parse({
    sequence: Number(r.sequence),
    rolloutId: r.rollout_id,
    threadId: r.thread_id,
    runId: r.run_id,
    type: r.type,
    payload: JSON.parse(r.payload),
    createdAt: r.created_at,
  });
}

export async function listEvents(
  ctx: Ctx,
  id: string,
  q: { limit: number; cursor?: string; rollout_id?: string; include?: 'all_rollouts' },
): Promise<{ thread: Thread; events: ThreadEvent[]; hasMore: boolean; nextCursor: string | null }> {
  requireScope(ctx, 'agent:read');
  const row = await ownThread(ctx, id, 'read its events');
  let query = exec(ctx).selectFrom('thread_events').selectAll().where('thread_id', '=', row.id);
  if (q.rollout_id) {
    const known = await exec(ctx)
      .selectFrom('thread_rollouts')
      .select('id')
      .where('thread_id', '=', row.id)
      .where('id', '=', q.rollout_id)
      .executeTakeFirst();
    if (!known) throw errors.notFound('rollout', q.rollout_id);
    query = query.where('rollout_id', '=', q.rollout_id);
  } else if (q.include !== 'all_rollouts' && row.active_rollout_id) query = query.where('rollout_id', '=', row.active_rollout_id);
  if (q.cursor) {
    const [after] = decodeCursor(q.cursor, 1);
    if (typeof after !== 'number') throw errors.invalidField('cursor', 'is not a cursor this endpoint issued');
    query = query.where('sequence', '>', after);
  }
  const rows = await query
    .orderBy('sequence')
    .limit(q.limit + 1)
    .execute();
  const hasMore = rows.length > q.limit;
  const events = rows.slice(0, q.limit).map(toEvent);
  return { thread: toThread(row), events, hasMore, nextCursor: hasMore ? encodeCursor([events[events.length - 1]!.sequence]) : null };
}

/** Durable events after `sequence`, oldest first (reconnect replay and gap filling). */
export async function eventsAfter(deps: Deps, threadId: string, sequence: number, upTo: number | null, limit: number): Promise<ThreadEvent[]> {
  let q = deps.db.kysely.selectFrom('thread_events').selectAll().where('thread_id', '=', threadId).where('sequence', '>', sequence);
  if (upTo !== null) q = q.where('sequence', '<=', upTo);
  return (await q.orderBy('sequence').limit(limit).execute()).map(toEvent);
}

// ---- metadata changes ------------------------------------------------------------------------

async function publishMeta(deps: Deps, threadId: string, frame: MetadataFrame): Promise<void> {
  await publishFrame(deps, threadId, frame);
}

function threadActivity(ctx: Ctx, row: Row, eventType: string, title: string, metadata: Record<string, unknown> = {}) {
  return recordActivity(
    ctx,
    { resourceType: 'thread', resourceId: row.id, threadId: row.id, eventType, status: 'completed', title, metadata },
    row.org_id,
  );
}

export async function updateThread(ctx: Ctx, id: string, body: { title?: string | null; archived?: boolean }): Promise<Thread> {
  requireScope(ctx, 'agent:run');
  const row = await ownThread(ctx, id, 'change it');
  const now = nowIso();
  const renamed = body.title !== undefined && body.title !== row.title;
  const archiveChanged = body.archived !== undefined && (body.archived ? 1 : 0) !== row.archived;
  if (!renamed && !archiveChanged) return toThread(row);
  const next: Row = {
    ...row,
    title: renamed ? (body.title ?? null) : row.title,
    archived: archiveChanged ? (body.archived ? 1 : 0) : row.archived,
    updated_at: now,
  };
  await withTx(ctx, async (tx) => {
    await exec(tx).updateTable('threads').set({ title: next.title, archived: next.archived, updated_at: now }).where('id', '=', id).execute();
    if (renamed)
      await threadActivity(tx, row, 'thread.renamed', `Thread renamed to ${next.title ?? '(untitled)'}`, { from: row.title, to: next.title });
    if (archiveChanged)
      await threadActivity(tx, row, next.archived ? 'thread.archived' : 'thread.unarchived', next.archived ? 'Thread archived' : 'Thread unarchived');
  });
  if (renamed) await publishMeta(ctx.deps, id, { type: 'thread_renamed', threadId: id, title: next.title, updatedAt: now });
  if (archiveChanged) await publishMeta(ctx.deps, id, { type: 'thread_archived', threadId: id, archived: next.archived === 1, updatedAt: now });
  return toThread(next);
}

/** Ends a run so its thread can be deleted: the runs domain's, registered by buildApp (runs imports threads). */
export type RunCanceller = (ctx: Ctx, runId: string) => Promise<void>;
const RUN_CANCELLER = stateKey('threads.runCanceller', () => ({ cancel: null as RunCanceller | null }));
export function setRunCanceller(deps: Deps, fn: RunCanceller): void {
  deps.state.get(RUN_CANCELLER).cancel = fn;
}

/** How long a delete waits for a cancelled run to let go of its thread. */
const CANCEL_WAIT_MS = 10_000;

/**
 * Deletes a thread in any state: a run active on it is cancelled first (its `run_completed` says `cancelled`, and
 * subscribers see it before `thread_deleted`). A compaction or another delete holding the thread answers 409
 * `THREAD_BUSY`, as does a run that did not end within 10 s of its cancel.
 */
export async function deleteThread(ctx: Ctx, id: string): Promise<void> {
  requireScope(ctx, 'agent:run');
  const { row, view } = await findThread(ctx, id);
  if (view !== 'owner' && !isOrgAdmin(ctx)) throw errors.forbidden('only the thread’s owner or an organization admin can delete it');
  const cancel = ctx.deps.state.get(RUN_CANCELLER).cancel;
  try {
    await removeThread(ctx, row);
  } catch (err) {
    const runId = err instanceof AppError && err.code === 'THREAD_BUSY' ? String(err.details?.activeRunId ?? '') : '';
    if (!cancel || !runId.startsWith('run_')) throw err;
    await cancel(ctx, runId);
    for (const until = Date.now() + CANCEL_WAIT_MS; (await activeRun(ctx.deps, id)) === runId && Date.now() < until; ) await sleep(50);
    await removeThread(ctx, row);
  }
  await ctx.deps.blobs.delete(jsonlKey(row.org_id, id)).catch(() => undefined);
  await publishMeta(ctx.deps, id, { type: 'thread_deleted', threadId: id, deletedAt: nowIso() });
}

async function removeThread(ctx: Ctx, row: Row): Promise<void> {
  const id = row.id;
  await inTurn(ctx.deps, id, () =>
    withTx(ctx, async (tx) => {
      if (!(await lockThreadRow(ctx.deps, tx.trx!, id))) throw errors.notFound('thread', id);
      // The busy check is taking the thread's run lock inside this transaction: a run that holds it makes the
      // delete 409, and a run starting meanwhile waits on the lock row until the thread is gone (PostgreSQL;
      // SQLite runs one transaction at a time).
      const now = new Date();
      const took = await exec(tx)
        .insertInto('thread_run_locks')
        .values({
          thread_id: id,
          run_id: `delete_${ctx.requestId}`,
          holder: ctx.deps.config.sandboxes.nodeId,
          acquired_at: now.toISOString(),
          expires_at: new Date(now.getTime() + 60_000).toISOString(),
        })
        .onConflict((oc) =>
          oc
            .column('thread_id')
            .doUpdateSet({ run_id: `delete_${ctx.requestId}`, acquired_at: now.toISOString() })
            .where('thread_run_locks.expires_at', '<=', now.toISOString()),
        )
        .executeTakeFirst();
      if (Number(took.numInsertedOrUpdatedRows ?? 0) !== 1) {
        const busy = await exec(tx).selectFrom('thread_run_locks').select('run_id').where('thread_id', '=', id).executeTakeFirst();
        throw threadBusy(busy?.run_id ?? 'unknown');
      }
      await exec(tx).deleteFrom('thread_events').where('thread_id', '=', id).execute();
      await exec(tx).deleteFrom('thread_rollouts').where('thread_id', '=', id).execute();
      await exec(tx).deleteFrom('thread_run_locks').where('thread_id', '=', id).execute();
      await exec(tx).deleteFrom('threads').where('id', '=', id).execute();
      await threadActivity(tx, row, 'thread.deleted', `Thread ${row.title ?? row.id} deleted`);
    }),
  );
}

// ---- transient frames ------------------------------------------------------------------------

export type TransientPublisher = (frame: TransientFrame) => Promise<void>;

/**
 * Opens a thread's rollout for transient frames, once: only the thread's owner may, and only on a rollout of
 * the thread. The publisher fans each frame out to the thread's subscribers: not stored, no sequence, no
 * timestamps touched. Local-device clients (POST /v1/thread-events) and runs publish through here alike.
 */
export async function transientPublisher(ctx: Ctx, threadId: string, rolloutId: string): Promise<TransientPublisher> {
  requireScope(ctx, 'agent:run');
  const row = await ownThread(ctx, threadId, 'publish frames to it');
  const rollout = await exec(ctx)
    .selectFrom('thread_rollouts')
    .select('id')
    .where('thread_id', '=', row.id)
    .where('id', '=', rolloutId)
    .executeTakeFirst();
  if (!rollout) throw errors.invalidField('frame.rolloutId', `is not a rollout of thread ${threadId}`);
  const { deps } = ctx;
  return async (frame) => {
    if (frame.rolloutId !== rolloutId)
      throw errors.invalidField('frame.rolloutId', `is not rollout ${rolloutId}, the one this publisher was opened for`);
    // `sequence` marks durable frames on the wire; a transient frame never carries one.
    const { sequence: _ignored, ...fields } = frame;
    await publishFrame(deps, threadId, TransientFrame.parse({ ...fields, threadId }));
  };
}

/** One transient frame (see `transientPublisher`). */
export async function publishTransient(ctx: Ctx, threadId: string, frame: TransientFrame): Promise<void> {
  await (await transientPublisher(ctx, threadId, frame.rolloutId))(frame);
}

/**
 * Follows one run's frames on its thread as they are published (durable and transient, from any replica) until
 * its `run_completed`: what a streaming caller of a run that runs elsewhere (a local-device run) receives.
 * `started` runs once the subscription is live, so nothing it causes is missed. Rejects when `signal` aborts.
 */
export async function followRun(
  deps: Deps,
  threadId: string,
  runId: string,
  emit: (frame: DurableFrame | TransientFrame) => void,
  signal: AbortSignal,
  started: () => Promise<void>,
): Promise<void> {
  let done!: () => void;
  let fail!: (err: unknown) => void;
  const ended = new Promise<void>((resolve, reject) => {
    done = resolve;
    fail = reject;
  });
  const onFrame = (frame: BusFrame) => {
    // Metadata frames carry no run id: only this run's durable and transient frames pass.
    if (!('runId' in frame) || frame.runId !== runId) return;
    emit(frame);
    if (frame.type === 'run_completed') done();
  };
  const unsubscribe = await subscribeParsed(deps.bus, threadChannel(threadId), BusFrame, onFrame, () => undefined);
  const onAbort = () => fail(signal.reason ?? new Error('aborted'));
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    if (signal.aborted) onAbort();
    await started();
    await ended;
  } finally {
    signal.removeEventListener('abort', onAbort);
    await unsubscribe().catch(() => undefined);
  }
}

/** Frames a linked device publishes for its run go to the device mesh (registered by app.ts: threads cannot import it). */
export type DeviceFrameHandler = (ctx: Ctx, threadId: string, frame: ThreadEventFrame) => Promise<ThreadEventsResult>;
const DEVICE_FRAMES = stateKey('threads.deviceFrames', () => ({ handler: null as DeviceFrameHandler | null }));

export function registerDeviceFrames(deps: Deps, handler: DeviceFrameHandler): void {
  deps.state.get(DEVICE_FRAMES).handler = handler;
}

/**
 * POST /v1/thread-events. A person's credential publishes transient frames to their own thread; durable frames come
 * only from the device credential of a local-device run's device, which the device mesh checks (ADR 0029).
 */
export async function publishThreadEvent(ctx: Ctx, threadId: string, frame: ThreadEventFrame): Promise<ThreadEventsResult> {
  if (ctx.principal.kind === 'device') {
    const handler = ctx.deps.state.get(DEVICE_FRAMES).handler;
    if (!handler) throw errors.unavailable('this process does not serve the device mesh');
    return handler(ctx, threadId, frame);
  }
  if ((DEVICE_DURABLE_TYPES as readonly string[]).includes(frame.type)) {
    throw errors.invalidField(
      'frame.type',
      `${frame.type} is durable: runs write it, and a local-device run's device with its own credential; publish transient frames here`,
    );
  }
  await publishTransient(ctx, threadId, frame as TransientFrame);
  return { accepted: true };
}
