/**
 * Local-device runs (ADR 0029): the run is recorded here and its thread held, the device mesh delivers it to its
 * node, and the node's loop reports back through the verbs below (accept, frames, completion). The mesh registers
 * itself with `registerLocalDispatcher` (app.ts): runs cannot import it (it imports runs).
 */
import type { ModelMessage } from 'ai';
import type { Selectable } from 'kysely';
import type { AgentRunsTable } from '../../database.js';
import { exec, orgId, systemCtx, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { stateKey } from '../../platform/state.js';
import { recordActivity } from '../activity/index.js';
import { findAgentRow } from '../agents/index.js';
import { runUsageTotals } from '../models/index.js';
import {
  appendDurable,
  followRun,
  renewRunLock,
  runFinalText,
  threadHistory,
  type DurableFrame,
  type DurableInput,
  type TransientFrame,
} from '../threads/index.js';
import type { RunResult, RunUsage } from './schemas.js';

type RunRow = Selectable<AgentRunsTable>;

/** What the mesh needs of a run to deliver it. */
export interface LocalRunRef {
  runId: string;
  threadId: string;
  orgId: string;
  nodeId: string;
}

/** The device mesh, as runs sees it. */
export interface LocalDispatcher {
  /** Throws (404, 409) unless `nodeId` is an active node the caller may run on. */
  check(ctx: Ctx, nodeId: string): Promise<void>;
  /** Queues the run for its node and tells the replica holding the node's connection. */
  dispatch(ctx: Ctx, run: LocalRunRef): Promise<void>;
  /** The run ended on the server's side (cancelled, failed): the device is told to stop. */
  ended(deps: Deps, run: LocalRunRef, reason: string): Promise<void>;
  /** How long a run waits for its device (seconds). */
  timeoutSeconds(deps: Deps): number;
  /** Whether the mesh has the run (queued, delivered, taken or done); false: it was never handed over. */
  tracked(deps: Deps, run: LocalRunRef): Promise<boolean>;
}

const DEVICE_STATE = stateKey('runs.device', () => ({ dispatcher: null as LocalDispatcher | null }));

export function registerLocalDispatcher(deps: Deps, dispatcher: LocalDispatcher): void {
  deps.state.get(DEVICE_STATE).dispatcher = dispatcher;
}

export function localDispatcher(deps: Deps): LocalDispatcher {
  const d = deps.state.get(DEVICE_STATE).dispatcher;
  if (!d) throw errors.unavailable('local-device runs need the device mesh, which this process does not serve (orchestrator service)');
  return d;
}

/** A device run holds its thread while its device may still come back: its own wait plus a minute. */
export const deviceLockTtlMs = (deps: Deps): number => (localDispatcher(deps).timeoutSeconds(deps) + 60) * 1000;

export const refOf = (row: Pick<RunRow, 'id' | 'thread_id' | 'org_id' | 'target_device_id'>): LocalRunRef => ({
  runId: row.id,
  threadId: row.thread_id,
  orgId: row.org_id,
  nodeId: row.target_device_id ?? '',
});

/** The owner's context for a run's own writes (frames, finish): the run acts as its creator. */
const ownerCtx = (deps: Deps, row: RunRow): Ctx =>
  systemCtx(deps, { userId: row.created_by_user_id, orgId: row.org_id, role: null, scopes: new Set(['agent:run', 'agent:read']), apiKeyId: null });

/**
 * A run the calling device may act on: of its organization, targeted at `nodeId`, and not ended. An ended run is
 * 409 (the device stops), another node's or an unknown one 404.
 */
export async function deviceRun(ctx: Ctx, nodeId: string, runId: string): Promise<RunRow> {
  const row = await exec(ctx).selectFrom('agent_runs').selectAll().where('id', '=', runId).where('org_id', '=', orgId(ctx)).executeTakeFirst();
  if (row?.execution_mode !== 'local-desktop' || row.target_device_id !== nodeId) throw errors.notFound('run', runId);
  if (row.status !== 'registered' && row.status !== 'running') throw errors.invalidState(`run ${runId} is ${row.status}`, row.status);
  return row;
}

/** What the device's loop starts from: the agent, and the thread's conversation (the new user message last). */
export async function devicePayload(ctx: Ctx, row: RunRow) {
  const agent = await findAgentRow(ownerCtx(ctx.deps, row), row.agent_slug);
  const { summary, messages } = await threadHistory(ownerCtx(ctx.deps, row), row.thread_id, row.rollout_id);
  const instructions = [agent.instructions, summary ? `Summary of the conversation so far:\n${summary}` : null].filter(Boolean).join('\n\n') || null;
  const config = { ...(JSON.parse(agent.config) as Record<string, unknown>) };
  const model: ModelMessage[] = messages.map((m) => ({ role: m.role, content: m.text }));
  return {
    runId: row.id,
    threadId: row.thread_id,
    rolloutId: row.rollout_id ?? '',
    agent: { slug: agent.slug, instructions, tools: JSON.parse(agent.tools) as string[], config },
    messages: model,
  };
}

/** The device took the run: registered -> running. False when it had ended meanwhile. */
export async function acceptDeviceRun(ctx: Ctx, row: RunRow): Promise<boolean> {
  if (row.status === 'running') return true;
  return withTx(ctx, async (tx) => {
    const took = await exec(tx)
      .updateTable('agent_runs')
      .set({ status: 'running' })
      .where('id', '=', row.id)
      .where('org_id', '=', row.org_id)
      .where('status', '=', 'registered')
      .executeTakeFirst();
    if (Number(took.numUpdatedRows) !== 1) return false;
    await recordActivity(
      tx,
      {
        resourceType: 'agent',
        resourceId: row.agent_id,
        agentRunId: row.id,
        threadId: row.thread_id,
        runmeshNodeId: row.target_device_id ?? undefined,
        eventType: 'agent.run.accepted',
        status: 'started',
        title: `Run of ${row.agent_slug} taken by its device`,
      },
      row.org_id,
    );
    return true;
  });
}

/** Keeps the run's hold on its thread while its device is connected. */
export async function renewDeviceRun(deps: Deps, row: Pick<RunRow, 'id' | 'thread_id'>): Promise<void> {
  await renewRunLock(deps, row.thread_id, row.id, deviceLockTtlMs(deps)).catch(() => undefined);
}

/** A durable frame of the device's run, through the thread's single writer (which gives it its sequence). */
export async function appendDeviceFrame(ctx: Ctx, row: RunRow, frame: DurableInput): Promise<DurableFrame> {
  const [event] = await appendDurable(ctx.deps, row.thread_id, [{ ...frame, runId: row.id, rolloutId: row.rollout_id ?? undefined }]);
  await renewDeviceRun(ctx.deps, row);
  return event!;
}

type Finish = (
  ctx: Ctx,
  row: RunRow,
  agent: { id: string; slug: string },
  end: { status: RunResult['status']; result: string | null; error: string | null; usage: RunUsage },
  durable: (frames: DurableInput[]) => Promise<DurableFrame[]>,
) => Promise<RunResult>;

/**
 * Ends a device run once, whoever ends it (the device's `run_completed`, cancel, revocation, the timeout): the
 * status is claimed by a conditional update, so of two enders one writes `run_completed`. Usage is the meter's
 * count of the run's model calls. Null when it had already ended.
 */
export async function endDeviceRun(
  deps: Deps,
  row: RunRow,
  end: { status: 'completed' | 'failed' | 'cancelled' | 'max_turns'; error: string | null; iterations?: number },
  finish: Finish,
): Promise<RunResult | null> {
  const claimed = await deps.db.kysely
    .updateTable('agent_runs')
    .set({ status: end.status, error: end.error })
    .where('id', '=', row.id)
    .where('org_id', '=', row.org_id)
    .where('status', 'in', ['registered', 'running'])
    .executeTakeFirst();
  if (Number(claimed.numUpdatedRows) !== 1) return null;
  const ctx = ownerCtx(deps, row);
  const u = await runUsageTotals(ctx, row.id);
  const usage: RunUsage = { ...u, promptTokens: u.inputTokens, completionTokens: u.outputTokens };
  const result = await finish(
    ctx,
    { ...row, iterations: end.iterations ?? row.iterations },
    { id: row.agent_id, slug: row.agent_slug },
    {
      status: end.status,
      // What the run answered: its last assistant message in the thread (written by the thread's writer, not the device's say).
      result: end.status === 'completed' || end.status === 'max_turns' ? await runFinalText(ctx, row.thread_id, row.id) : null,
      error: end.error,
      usage,
    },
    endingWriter(deps, row),
  );
  if (end.status === 'cancelled' || end.status === 'failed') {
    await localDispatcher(deps)
      .ended(deps, refOf(row), end.error ?? end.status)
      .catch((err) => deps.log.warn({ err, runId: row.id }, 'could not tell the device its run ended'));
  }
  return result;
}

/**
 * A streaming caller of a device run follows the thread until the run's `run_completed`; leaving cancels the run.
 * Resolves with the final record.
 */
export async function followDeviceRun(
  ctx: Ctx,
  row: RunRow,
  emit: (frame: DurableFrame | TransientFrame) => void,
  signal: AbortSignal,
  started: () => Promise<void>,
  finish: Finish,
): Promise<void> {
  try {
    await followRun(ctx.deps, row.thread_id, row.id, emit, signal, started);
  } catch (err) {
    if (!signal.aborted) throw err;
    await endDeviceRun(ctx.deps, row, { status: 'cancelled', error: 'the run was cancelled' }, finish);
  }
}

/** A local-device run that has not ended, by id within its organization (the mesh's sweeps); null otherwise. */
export async function openLocalRun(deps: Deps, org: string, runId: string): Promise<RunRow | null> {
  const row = await deps.db.kysely.selectFrom('agent_runs').selectAll().where('id', '=', runId).where('org_id', '=', org).executeTakeFirst();
  return row && row.execution_mode === 'local-desktop' && (row.status === 'registered' || row.status === 'running') ? row : null;
}

/** The durable writer of a run ended from outside its loop (a sweep, another replica): a deleted thread is no error. */
export function endingWriter(deps: Deps, row: Pick<RunRow, 'id' | 'thread_id'>) {
  return async (frames: DurableInput[]) =>
    appendDurable(
      deps,
      row.thread_id,
      frames.map((f) => ({ ...f, runId: row.id })),
    ).catch((err: unknown) => {
      if (err instanceof AppError && err.code === 'not_found') return []; // its thread was deleted meanwhile
      throw err;
    });
}

/**
 * Local-device runs the mesh never got (the process stopped between recording the run and handing it over): once
 * older than the dispatch timeout plus a minute, they fail, so their thread is free. Returns how many.
 */
export async function failUndispatchedRuns(deps: Deps, finish: Finish): Promise<number> {
  const dispatcher = deps.state.get(DEVICE_STATE).dispatcher;
  if (!dispatcher) return 0;
  const before = new Date(Date.now() - deviceLockTtlMs(deps)).toISOString();
  const rows = await deps.db.kysely
    .selectFrom('agent_runs')
    .selectAll()
    .where('execution_mode', '=', 'local-desktop')
    .where('status', 'in', ['registered', 'running'])
    .where('created_at', '<', before)
    .limit(200)
    .execute();
  let n = 0;
  for (const row of rows) {
    if (await dispatcher.tracked(deps, refOf(row))) continue;
    if (await endDeviceRun(deps, row, { status: 'failed', error: 'the server stopped before the run was handed to its device' }, finish)) n++;
  }
  return n;
}
