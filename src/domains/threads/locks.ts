/**
 * One active run per thread, across replicas: a lock row per thread that a run takes, renews while it lasts
 * and releases at the end (compaction takes it too); an expired lock is taken over.
 */
import type { Deps } from '../../platform/context.js';
import { errors } from '../../platform/http/errors.js';
import { nowIso } from '../../platform/ids.js';

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
