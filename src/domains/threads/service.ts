import type { Selectable, Transaction } from 'kysely';
import type { Database, ThreadRolloutsTable, ThreadsTable } from '../../database.js';
import { exec, isOrgAdmin, orgId, requireAnyScope, requireScope, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { errors } from '../../platform/http/errors.js';
import { decodeCursor, encodeCursor } from '../../platform/http/pagination.js';
import { newestFirstPage } from '../../platform/db/pages.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { KeyedQueue } from '../../platform/keyed-queue.js';
import { stateKey } from '../../platform/state.js';
import { recordActivity } from '../activity/index.js';
import {
  DURABLE_TYPES,
  DurableInput,
  DurablePayloads,
  type DurablePayload,
  jsonlKey,
  threadChannel,
  ThreadEvent,
  TransientFrame,
  type BusFrame,
  type DurableFrame,
  type MetadataFrame,
} from './frames.js';
import type { Rollout, Thread } from './schemas.js';

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

async function ownThread(ctx: Ctx, id: string, action: string): Promise<Row> {
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

export async function listThreads(ctx: Ctx, q: { limit: number; cursor?: string; archived: boolean }) {
  requireScope(ctx, 'agent:read');
  let query = exec(ctx).selectFrom('threads').selectAll().where('org_id', '=', orgId(ctx)).where('owner_user_id', '=', ctx.principal.userId);
  if (!q.archived) query = query.where('archived', '=', 0);
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

// ---- the one write path for durable frames ---------------------------------------------------

/** The threads domain's state in one app: one writer per thread at a time in this process. */
export const THREAD_STATE = stateKey('threads', () => ({ writers: new KeyedQueue() }));

const inTurn = <T>(deps: Deps, threadId: string, fn: () => Promise<T>): Promise<T> => deps.state.get(THREAD_STATE).writers.run(threadId, fn);

type Trx = Transaction<Database>;

async function lockThreadRow(deps: Deps, trx: Trx, threadId: string): Promise<Row | undefined> {
  let q = trx.selectFrom('threads').selectAll().where('id', '=', threadId);
  if (deps.db.dialect === 'postgres') q = q.forUpdate();
  return q.executeTakeFirst();
}

/** Typed already, and checked again: a frame's JSON outlives the code that wrote it (the JSONL is read back by later versions). */
function checkDurable(frame: DurableInput): DurableInput {
  const parsed = DurableInput.safeParse(frame);
  if (parsed.success) return parsed.data;
  if (!(DURABLE_TYPES as readonly string[]).includes(frame.type)) throw new Error(`${frame.type} is not a durable frame type`);
  throw new Error(
    `a ${frame.type} frame does not match the catalogue: ${parsed.error.issues.map((i) => `${i.path.join('.')} ${i.message}`).join('; ')}`,
  );
}

/**
 * Appends durable frames to a thread: each gets the thread's next sequence, all are appended to the
 * thread's JSONL (the source of truth, one fsync) and projected into SQL in one transaction, then published
 * on the bus in order. One writer per thread at a time: an in-process queue, and across replicas the thread
 * row's lock (PostgreSQL; SQLite serializes writers anyway). Runs (and compaction) write only through here.
 */
export async function appendDurable(
  deps: Deps,
  threadId: string,
  frames: DurableInput[],
  opts: { extra?: (trx: Trx, events: DurableFrame[]) => Promise<void>; touch?: boolean } = {},
): Promise<DurableFrame[]> {
  const inputs = frames.map(checkDurable);
  return inTurn(deps, threadId, async () => {
    const events = await deps.db.kysely.transaction().execute(async (trx) => {
      let row = await lockThreadRow(deps, trx, threadId);
      if (!row) throw errors.notFound('thread', threadId);
      row = await repairTail(deps, trx, row);
      const key = jsonlKey(row.org_id, row.id);
      const now = nowIso();
      let seq = row.last_sequence;
      const events: DurableFrame[] = inputs.map((f) => ({
        ...f,
        sequence: ++seq,
        rolloutId: f.rolloutId ?? row!.active_rollout_id ?? '',
        threadId: row!.id,
        runId: f.runId ?? null,
        createdAt: now,
      }));
      const text = events.map((e) => `${JSON.stringify(e)}\n`).join('');
      await deps.blobs.append(key, text);
      await trx
        .insertInto('thread_events')
        .values(
          events.map((e) => ({
            thread_id: e.threadId,
            sequence: e.sequence,
            rollout_id: e.rolloutId,
            run_id: e.runId,
            type: e.type,
            payload: JSON.stringify(e.payload),
            created_at: e.createdAt,
          })),
        )
        .execute();
      await trx
        .updateTable('threads')
        .set({ last_sequence: seq, jsonl_bytes: row.jsonl_bytes + Buffer.byteLength(text), ...(opts.touch === false ? {} : { updated_at: now }) })
        .where('id', '=', row.id)
        .execute();
      await opts.extra?.(trx, events);
      return events;
    });
    for (const event of events) await publishFrame(deps, threadId, event);
    return events;
  });
}

/**
 * Brings the projection up to the JSONL: lines appended by a writer that crashed before its transaction
 * committed are projected (they are durable: the JSONL is the truth), and a torn last line is closed with a
 * newline so it reads as one unparsable line, skipped.
 */
async function repairTail(deps: Deps, trx: Trx, row: Row): Promise<Row> {
  const key = jsonlKey(row.org_id, row.id);
  const size = (await deps.blobs.size(key)) ?? 0;
  if (size <= row.jsonl_bytes) return row;
  const chunks: Buffer[] = [];
  for await (const c of await deps.blobs.get(key, { start: row.jsonl_bytes, end: size - 1 })) chunks.push(c as Buffer);
  const tail = Buffer.concat(chunks).toString('utf8');
  let bytes = size;
  if (!tail.endsWith('\n')) {
    await deps.blobs.append(key, '\n');
    bytes += 1;
  }
  let last = row.last_sequence;
  for (const line of tail.split('\n')) {
    const event = parseLine(line);
    if (!event || event.sequence <= last) continue;
    await projectEvent(trx, event);
    last = event.sequence;
  }
  await trx.updateTable('threads').set({ last_sequence: last, jsonl_bytes: bytes }).where('id', '=', row.id).execute();
  deps.log.warn({ threadId: row.id, recovered: last - row.last_sequence }, 'thread projection caught up with its JSONL');
  return { ...row, last_sequence: last, jsonl_bytes: bytes };
}

function parseLine(line: string): ThreadEvent | null {
  if (!line.trim()) return null;
  try {
    const e = ThreadEvent.safeParse(JSON.parse(line));
    return e.success ? e.data : null;
  } catch {
    return null; // a torn line
  }
}

/** Inserts one event into the projection; a compaction's rollout is recreated from its frame if missing. */
async function projectEvent(trx: Trx, e: ThreadEvent): Promise<void> {
  await trx
    .insertInto('thread_events')
    .values({
      thread_id: e.threadId,
      sequence: e.sequence,
      rollout_id: e.rolloutId,
      run_id: e.runId,
      type: e.type,
      payload: JSON.stringify(e.payload),
      created_at: e.createdAt,
    })
    .onConflict((oc) => oc.columns(['thread_id', 'sequence']).doNothing())
    .execute();
  if (e.type === 'compaction_completed') {
    const p = DurablePayloads.compaction_completed.parse(e.payload);
    const exists = await trx.selectFrom('thread_rollouts').select('id').where('id', '=', p.rolloutId).executeTakeFirst();
    if (!exists) {
      await trx.updateTable('thread_rollouts').set({ status: 'closed', closed_at: e.createdAt }).where('id', '=', p.fromRolloutId).execute();
      await trx
        .insertInto('thread_rollouts')
        .values({
          id: p.rolloutId,
          thread_id: e.threadId,
          position: p.position,
          kind: 'compaction',
          status: 'active',
          from_rollout_id: p.fromRolloutId,
          summary: p.summary,
          summary_method: p.summaryMethod,
          summary_model: p.summaryModel ?? null,
          created_at: e.createdAt,
          closed_at: null,
        })
        .execute();
      await trx.updateTable('threads').set({ active_rollout_id: p.rolloutId }).where('id', '=', e.threadId).execute();
    }
  }
}

/** Rebuilds a thread's projection from its JSONL alone (the `hangar threads rebuild` command). */
export async function rebuildThread(deps: Deps, threadId: string): Promise<{ events: number; lastSequence: number }> {
  return inTurn(deps, threadId, () =>
    deps.db.kysely.transaction().execute(async (trx) => {
      const row = await lockThreadRow(deps, trx, threadId);
      if (!row) throw errors.notFound('thread', threadId);
      const key = jsonlKey(row.org_id, row.id);
      let size = (await deps.blobs.size(key)) ?? 0;
      let text = '';
      if (size > 0) {
        const chunks: Buffer[] = [];
        for await (const c of await deps.blobs.get(key)) chunks.push(c as Buffer);
        text = Buffer.concat(chunks).toString('utf8');
        if (!text.endsWith('\n')) {
          await deps.blobs.append(key, '\n');
          size += 1;
        }
      }
      await trx.deleteFrom('thread_events').where('thread_id', '=', row.id).execute();
      let last = 0;
      let count = 0;
      for (const line of text.split('\n')) {
        const event = parseLine(line);
        if (!event || event.sequence <= last) continue;
        await projectEvent(trx, event);
        last = event.sequence;
        count++;
      }
      await trx.updateTable('threads').set({ last_sequence: last, jsonl_bytes: size }).where('id', '=', row.id).execute();
      return { events: count, lastSequence: last };
    }),
  );
}

/** Start-up check: every thread whose JSONL is longer than its projection catches up. */
export async function repairAll(deps: Deps): Promise<number> {
  const rows = await deps.db.kysely.selectFrom('threads').select(['id', 'org_id', 'jsonl_bytes']).execute();
  let repaired = 0;
  for (const r of rows) {
    const size = (await deps.blobs.size(jsonlKey(r.org_id, r.id))) ?? 0;
    if (size <= r.jsonl_bytes) continue;
    await inTurn(deps, r.id, () =>
      deps.db.kysely.transaction().execute(async (trx) => {
        const row = await lockThreadRow(deps, trx, r.id);
        if (row) await repairTail(deps, trx, row);
      }),
    );
    repaired++;
  }
  return repaired;
}

// ---- metadata changes ------------------------------------------------------------------------

/** Every frame reaches the thread's subscribers (on every replica) through here. */
async function publishFrame(deps: Deps, threadId: string, frame: BusFrame): Promise<void> {
  await deps.bus.publish(threadChannel(threadId), frame);
}

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

export async function deleteThread(ctx: Ctx, id: string): Promise<void> {
  requireScope(ctx, 'agent:run');
  const { row, view } = await findThread(ctx, id);
  if (view !== 'owner' && !isOrgAdmin(ctx)) throw errors.forbidden('only the thread’s owner or an organization admin can delete it');
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
  await ctx.deps.blobs.delete(jsonlKey(row.org_id, id)).catch(() => undefined);
  await publishMeta(ctx.deps, id, { type: 'thread_deleted', threadId: id, deletedAt: nowIso() });
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

// ---- one active run per thread ---------------------------------------------------------------

export function threadBusy(activeRunId: string) {
  return errors.threadBusy(`another run (${activeRunId}) is active on this thread`, activeRunId);
}

/**
 * Takes the thread's run lock for `runId` (a row per thread; an expired one is taken over), so at most one
 * run is active on a thread across every replica. Renew it while the run lasts; release it at the end.
 */
export async function acquireRunLock(
  deps: Deps,
  threadId: string,
  runId: string,
  ttlMs = 60_000,
): Promise<{ acquired: true } | { acquired: false; activeRunId: string }> {
  const now = new Date();
  const expires = new Date(now.getTime() + ttlMs).toISOString();
  const holder = deps.config.sandboxes.nodeId;
  const inserted = await deps.db.kysely
    .insertInto('thread_run_locks')
    .values({ thread_id: threadId, run_id: runId, holder, acquired_at: now.toISOString(), expires_at: expires })
    .onConflict((oc) => oc.column('thread_id').doNothing())
    .executeTakeFirst();
  if (Number(inserted.numInsertedOrUpdatedRows ?? 0) === 1) return { acquired: true };
  const taken = await deps.db.kysely
    .updateTable('thread_run_locks')
    .set({ run_id: runId, holder, acquired_at: now.toISOString(), expires_at: expires })
    .where('thread_id', '=', threadId)
    .where((eb) => eb.or([eb('expires_at', '<=', now.toISOString()), eb('run_id', '=', runId)]))
    .executeTakeFirst();
  if (Number(taken.numUpdatedRows) === 1) return { acquired: true };
  const current = await deps.db.kysely.selectFrom('thread_run_locks').select('run_id').where('thread_id', '=', threadId).executeTakeFirst();
  if (!current) return acquireRunLock(deps, threadId, runId, ttlMs); // released in between
  return { acquired: false, activeRunId: current.run_id };
}

export async function renewRunLock(deps: Deps, threadId: string, runId: string, ttlMs = 60_000): Promise<boolean> {
  const res = await deps.db.kysely
    .updateTable('thread_run_locks')
    .set({ expires_at: new Date(Date.now() + ttlMs).toISOString() })
    .where('thread_id', '=', threadId)
    .where('run_id', '=', runId)
    .executeTakeFirst();
  return Number(res.numUpdatedRows) === 1;
}

export async function releaseRunLock(deps: Deps, threadId: string, runId: string): Promise<void> {
  await deps.db.kysely.deleteFrom('thread_run_locks').where('thread_id', '=', threadId).where('run_id', '=', runId).execute();
}

export async function activeRun(deps: Deps, threadId: string): Promise<string | null> {
  const row = await deps.db.kysely
    .selectFrom('thread_run_locks')
    .select('run_id')
    .where('thread_id', '=', threadId)
    .where('expires_at', '>', nowIso())
    .executeTakeFirst();
  return row?.run_id ?? null;
}

// ---- compaction ------------------------------------------------------------------------------

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
