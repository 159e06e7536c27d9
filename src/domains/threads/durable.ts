/**
 * The one write path for a thread's durable frames (`appendDurable`: JSONL first, then the SQL projection,
 * then the bus) and its repair: a projection that fell behind its JSONL catches up (`repairAll` at start-up)
 * or is rebuilt from the JSONL alone (`rebuildThread`).
 */
import type { Selectable, Transaction } from 'kysely';
import type SQLite from 'better-sqlite3';
import type { Database, ThreadsTable } from '../../database.js';
import { onSqliteConnection } from '../../platform/db/index.js';
import type { Deps } from '../../platform/context.js';
import { errors } from '../../platform/http/errors.js';
import { nowIso } from '../../platform/ids.js';
import { KeyedQueue } from '../../platform/keyed-queue.js';
import { stateKey } from '../../platform/state.js';
import { DURABLE_TYPES, DurableInput, DurablePayloads, jsonlKey, threadChannel, ThreadEvent, type BusFrame, type DurableFrame } from './frames.js';

type Row = Selectable<ThreadsTable>;
/** What an append needs of the thread's row. */
type Head = Pick<Row, 'id' | 'org_id' | 'last_sequence' | 'jsonl_bytes' | 'active_rollout_id'>;

/** The threads domain's state in one app: one writer per thread at a time in this process. */
export const THREAD_STATE = stateKey('threads', () => ({
  writers: new KeyedQueue(),
  projections: { waiting: [] as Projection[], flushing: false },
  sqlite: null as SqliteStatements | null,
}));

export const inTurn = <T>(deps: Deps, threadId: string, fn: () => Promise<T>): Promise<T> => deps.state.get(THREAD_STATE).writers.run(threadId, fn);

type Trx = Transaction<Database>;

export async function lockThreadRow(deps: Deps, trx: Trx, threadId: string): Promise<Row | undefined> {
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

type AppendOpts = { extra?: (trx: Trx, events: DurableFrame[]) => Promise<void>; touch?: boolean };

/**
 * Appends durable frames to a thread: each gets the thread's next sequence, all are appended to the
 * thread's JSONL (the source of truth, one fsync) and projected into SQL, then published on the bus in order.
 * One writer per thread at a time: an in-process queue, and across replicas the thread row's lock.
 * Runs (and compaction) write only through here.
 *
 * On PostgreSQL the JSONL append happens inside the transaction that holds the row lock, which is what keeps
 * two replicas from numbering the same frames. On SQLite (one process writes the embedded database) the append
 * and its fsync happen before the transaction: appends to different threads then overlap their fsyncs instead
 * of each waiting for the others' behind SQLite's one connection, and the transaction (no fsync in WAL with
 * `synchronous = NORMAL`) only projects. A crash between the two leaves lines the projection lacks, which the
 * next append (`repairTail`) or the start-up check (`repairAll`) projects, as for a crash mid-transaction.
 */
export async function appendDurable(deps: Deps, threadId: string, frames: DurableInput[], opts: AppendOpts = {}): Promise<DurableFrame[]> {
  const inputs = frames.map(checkDurable);
  return inTurn(deps, threadId, async () => {
    const events =
      deps.db.dialect === 'sqlite' ? await appendThenProject(deps, threadId, inputs, opts) : await appendLocked(deps, threadId, inputs, opts);
    for (const event of events) await publishFrame(deps, threadId, event);
    return events;
  });
}

function numbered(row: Head, inputs: DurableInput[]): { events: DurableFrame[]; text: string } {
  const now = nowIso();
  let seq = row.last_sequence;
  const events: DurableFrame[] = inputs.map((f) => ({
    ...f,
    sequence: ++seq,
    rolloutId: f.rolloutId ?? row.active_rollout_id ?? '',
    threadId: row.id,
    runId: f.runId ?? null,
    createdAt: now,
  }));
  return { events, text: events.map((e) => `${JSON.stringify(e)}\n`).join('') };
}

function projected(
  row: Head,
  events: DurableFrame[],
  text: string,
  opts: AppendOpts,
): { last_sequence: number; jsonl_bytes: number; updated_at?: string } {
  const last = events[events.length - 1]!;
  return {
    last_sequence: last.sequence,
    jsonl_bytes: row.jsonl_bytes + Buffer.byteLength(text),
    ...(opts.touch === false ? {} : { updated_at: last.createdAt }),
  };
}

/** PostgreSQL: number, append and project under the thread row's lock, in one transaction. */
function appendLocked(deps: Deps, threadId: string, inputs: DurableInput[], opts: AppendOpts): Promise<DurableFrame[]> {
  return deps.db.kysely.transaction().execute(async (trx) => {
    let row = await lockThreadRow(deps, trx, threadId);
    if (!row) throw errors.notFound('thread', threadId);
    row = await repairTail(deps, trx, row);
    const { events, text } = numbered(row, inputs);
    await deps.blobs.append(jsonlKey(row.org_id, row.id), text);
    await trx.insertInto('thread_events').values(events.map(eventRow)).execute();
    await trx
      .updateTable('threads')
      .set(projected(row, events, text, opts))
      .where('id', '=', row.id)
      .execute();
    await opts.extra?.(trx, events);
    return events;
  });
}

/**
 * SQLite: append (and fsync) first, then project, grouped with other threads' appends (`project`). The row is
 * read outside any transaction; this process's per-thread queue keeps its other writers out.
 */
async function appendThenProject(deps: Deps, threadId: string, inputs: DurableInput[], opts: AppendOpts): Promise<DurableFrame[]> {
  let row = await onSqliteConnection(deps.db, (db) => sqliteStatements(deps, db).row.get(threadId) as Head | undefined);
  if (!row) throw errors.notFound('thread', threadId);
  const key = jsonlKey(row.org_id, row.id);
  if (((deps.blobs.sizeNow ? deps.blobs.sizeNow(key) : await deps.blobs.size(key)) ?? 0) > row.jsonl_bytes) {
    row = await deps.db.kysely.transaction().execute(async (trx) => {
      const locked = await lockThreadRow(deps, trx, threadId);
      if (!locked) throw errors.notFound('thread', threadId);
      return repairTail(deps, trx, locked);
    });
  }
  const { events, text } = numbered(row, inputs);
  await deps.blobs.append(key, text);
  return new Promise<DurableFrame[]>((resolve, reject) => project(deps, { read: row, events, text, opts, resolve, reject }));
}

/** One append's projection, waiting for the next group commit. */
interface Projection {
  read: Head;
  events: DurableFrame[];
  text: string;
  opts: AppendOpts;
  resolve: (events: DurableFrame[]) => void;
  reject: (err: unknown) => void;
}

/**
 * Group commit of projections (SQLite): appends whose JSONL is written wait here, and one transaction projects
 * all that are waiting when the previous one ends, so 100 threads' appends cost a few commits, not 100. An
 * append with `extra` work gets a transaction of its own (its failure must not undo the others'); if a group's
 * transaction fails, each of its appends is tried alone, so only the one at fault fails.
 */
function project(deps: Deps, p: Projection): void {
  const state = deps.state.get(THREAD_STATE).projections;
  state.waiting.push(p);
  if (state.flushing) return;
  state.flushing = true;
  void (async () => {
    try {
      while (state.waiting.length) {
        // One turn of the event loop lets the appends whose fsync finished meanwhile join this group.
        await new Promise((resolve) => setImmediate(resolve));
        const batch = state.waiting.splice(0);
        const alone = batch.filter((x) => x.opts.extra);
        const grouped = batch.filter((x) => !x.opts.extra);
        const moved = grouped.length ? await projectGroup(deps, grouped).catch(() => grouped) : [];
        for (const x of grouped) if (!moved.includes(x)) x.resolve(x.events);
        alone.push(...moved);
        for (const x of alone) {
          await deps.db.kysely
            .transaction()
            .execute((trx) => projectOne(deps, trx, x))
            .then(() => x.resolve(x.events), x.reject);
        }
      }
    } finally {
      state.flushing = false;
    }
  })();
}

interface SqliteStatements {
  row: SQLite.Statement;
  update: SQLite.Statement;
  insert: SQLite.Statement;
}

function sqliteStatements(deps: Deps, db: SQLite.Database): SqliteStatements {
  const state = deps.state.get(THREAD_STATE);
  state.sqlite ??= {
    row: db.prepare('select id, org_id, last_sequence, jsonl_bytes, active_rollout_id from threads where id = ?'),
    update: db.prepare(
      'update threads set last_sequence = ?, jsonl_bytes = ?, updated_at = coalesce(?, updated_at) where id = ? and last_sequence = ? and jsonl_bytes = ?',
    ),
    insert: db.prepare('insert into thread_events (thread_id, sequence, rollout_id, run_id, type, payload, created_at) values (?, ?, ?, ?, ?, ?, ?)'),
  };
  return state.sqlite;
}

/**
 * Projects a group of appends in one SQLite transaction, with fixed prepared statements (no query building: the
 * hot path of every run's frames). Answers the appends whose row had moved (see `projectOne`), left for a
 * transaction of their own; if the transaction fails, all of them are.
 */
function projectGroup(deps: Deps, group: Projection[]): Promise<Projection[]> {
  return onSqliteConnection(deps.db, (db) => {
    const st = sqliteStatements(deps, db);
    const moved: Projection[] = [];
    db.transaction(() => {
      for (const x of group) {
        const next = projected(x.read, x.events, x.text, x.opts);
        const r = st.update.run(next.last_sequence, next.jsonl_bytes, next.updated_at ?? null, x.read.id, x.read.last_sequence, x.read.jsonl_bytes);
        if (r.changes !== 1) {
          moved.push(x);
          continue;
        }
        for (const e of x.events) {
          const v = eventRow(e);
          st.insert.run(v.thread_id, v.sequence, v.rollout_id, v.run_id, v.type, v.payload, v.created_at);
        }
      }
    })();
    return moved;
  });
}

/**
 * Projects one append: the row's update is conditional on it being as the writer read it, so a writer in another
 * process (`hangar threads rebuild`) that moved it meanwhile makes this one project from the JSONL instead (what
 * it appended is there).
 */
async function projectOne(deps: Deps, trx: Trx, { read, events, text, opts }: Projection): Promise<void> {
  const updated = await trx
    .updateTable('threads')
    .set(projected(read, events, text, opts))
    .where('id', '=', read.id)
    .where('last_sequence', '=', read.last_sequence)
    .where('jsonl_bytes', '=', read.jsonl_bytes)
    .executeTakeFirst();
  if (Number(updated.numUpdatedRows) === 1) {
    await trx.insertInto('thread_events').values(events.map(eventRow)).execute();
  } else {
    const current = await lockThreadRow(deps, trx, read.id);
    if (!current) throw errors.notFound('thread', read.id);
    await repairTail(deps, trx, current);
  }
  await opts.extra?.(trx, events);
}

/**
 * Brings the projection up to the JSONL: lines appended by a writer that crashed before its transaction
 * committed are projected (they are durable: the JSONL is the truth), and a torn last line is closed with a
 * newline so it reads as one unparsable line, skipped.
 */
async function repairTail<R extends Head>(deps: Deps, trx: Trx, row: R): Promise<R> {
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

/** The projection's row of a durable event (the JSONL line is the truth; this is what `thread_events` holds). */
function eventRow(e: ThreadEvent) {
  return {
    thread_id: e.threadId,
    sequence: e.sequence,
    rollout_id: e.rolloutId,
    run_id: e.runId,
    type: e.type,
    payload: JSON.stringify(e.payload),
    created_at: e.createdAt,
  };
}

/** Inserts one event into the projection; a compaction's rollout is recreated from its frame if missing. */
async function projectEvent(trx: Trx, e: ThreadEvent): Promise<void> {
  await trx
    .insertInto('thread_events')
    .values(eventRow(e))
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

/** Every frame reaches the thread's subscribers (on every replica) through here. */
export async function publishFrame(deps: Deps, threadId: string, frame: BusFrame): Promise<void> {
  await deps.bus.publish(threadChannel(threadId), frame);
}
