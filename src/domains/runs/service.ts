import type { Selectable } from 'kysely';
import type { AgentRunsTable, AgentsTable } from '../../database.js';
import { exec, orgId, requireAnyScope, requireScope, systemCtx, withTx, type Ctx, type Deps } from '../../platform/context.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { nowIso, uuid } from '../../platform/ids.js';
import { stateKey } from '../../platform/state.js';
import { recordActivity } from '../activity/index.js';
import { findAgentRow } from '../agents/index.js';
import { requireCredits } from '../billing/index.js';
import { providerError, resolveModel } from '../models/index.js';
import { createSandbox, getSandbox, resumeSandbox, threadSandboxCtx } from '../sandboxes/index.js';
import {
  acquireRunLock,
  activeRun,
  appendDurable,
  createThread,
  ExecutionMode,
  findThread,
  releaseRunLock,
  renewRunLock,
  threadBusy,
  transientPublisher,
  type DurableFrame,
  type DurableInput,
  type TransientFrame,
  type TransientOrigin,
  type TransientPublisher,
} from '../threads/index.js';
import { openSessionForRun, type RunSession, type RunToolResult } from '../sessions/index.js';
import { checkCatalogueTools } from './catalog-tools.js';
import { deviceLockTtlMs, endDeviceRun, endingWriter, failUndispatchedRuns, followDeviceRun, localDispatcher, refOf } from './device.js';
import { CancelledError } from './io.js';
import { runTurns } from './loop.js';
import type { RunBody, RunResult, RunUsage } from './schemas.js';

type AgentRow = Selectable<AgentsTable>;
type RunRow = Selectable<AgentRunsTable>;

const LOCK_TTL_MS = 120_000;

/** A frame as a run emits it: a durable or a transient frame of the thread's catalogue. SSE clients of POST /v1/run get these. */
export type RunFrame = DurableFrame | TransientFrame;

/** The runs domain's state in one app: its runs in progress, for cancel. */
export const RUN_STATE = stateKey('runs', () => ({ active: new Map<string, AbortController>() }));

const emptyUsage = (): RunUsage => ({
  promptTokens: 0,
  completionTokens: 0,
  totalTokens: 0,
  inputTokens: 0,
  outputTokens: 0,
  cachedInputTokens: 0,
  reasoningTokens: 0,
});

function toResult(row: RunRow): RunResult {
  return {
    runId: row.id,
    agent: row.agent_slug,
    sandboxId: row.sandbox_id,
    threadId: row.thread_id,
    rolloutId: row.rollout_id,
    targetDeviceId: row.target_device_id,
    executionMode: row.execution_mode as RunResult['executionMode'],
    model: row.model,
    status: row.status as RunResult['status'],
    result: row.result === null ? null : JSON.parse(row.result),
    error: row.error,
    usage: JSON.parse(row.usage) as RunUsage,
    iterations: row.iterations,
    createdAt: row.created_at,
    finishedAt: row.finished_at,
  };
}

/** A run of the caller's: GET /v1/runs/{id} (agent:read); cancel (agent:run) answers with it too. */
export async function getRun(ctx: Ctx, runId: string): Promise<RunResult> {
  requireAnyScope(ctx, ['agent:read', 'agent:run']);
  const row = await exec(ctx).selectFrom('agent_runs').selectAll().where('id', '=', runId).where('org_id', '=', orgId(ctx)).executeTakeFirst();
  if (!row || row.created_by_user_id !== ctx.principal.userId) throw errors.notFound('run', runId);
  return toResult(row);
}

export async function cancelRun(ctx: Ctx, runId: string): Promise<RunResult> {
  requireScope(ctx, 'agent:run');
  const run = await getRun(ctx, runId);
  if (run.executionMode === 'local-desktop' && (run.status === 'registered' || run.status === 'running')) {
    // A device run is ended here, at once, and its device told to stop; what it sends afterwards is refused.
    const row = await exec(ctx)
      .selectFrom('agent_runs')
      .selectAll()
      .where('id', '=', runId)
      .where('org_id', '=', orgId(ctx))
      .executeTakeFirstOrThrow();
    await endLocalRun(ctx.deps, row, { status: 'cancelled', error: 'the run was cancelled' });
    return getRun(ctx, runId);
  }
  if (run.status !== 'running') throw errors.invalidState(`run ${runId} is ${run.status}`, run.status);
  const { active } = ctx.deps.state.get(RUN_STATE);
  const controller = active.get(runId);
  if (!controller) {
    // A run whose process is gone (its thread lock lapsed) is finished here, and is then not running.
    const row = await exec(ctx).selectFrom('agent_runs').selectAll().where('id', '=', runId).executeTakeFirstOrThrow();
    if (await isOrphaned(ctx.deps, row)) {
      const failed = (await failOrphanedRun(ctx.deps, row)) ?? (await getRun(ctx, runId));
      throw errors.invalidState(`run ${runId} is ${failed.status}`, failed.status);
    }
    throw errors.unavailable(`run ${runId} is running on another node; cancel it there`);
  }
  controller.abort(new CancelledError());
  // The run ends itself (status cancelled) as soon as its current step notices.
  for (let i = 0; i < 100 && active.has(runId); i++) await new Promise((r) => setTimeout(r, 50));
  return getRun(ctx, runId);
}

function userText(body: RunBody): string {
  const parts = (body.messages ?? []).map((m) => (m.parts.length ? m.parts.map((p) => p.text).join('') : m.content)).filter(Boolean);
  if (body.prompt) parts.push(body.prompt);
  const text = parts.join('\n\n').trim();
  if (!text) throw errors.invalidField('prompt', 'give a prompt or messages with text');
  return text;
}

/** The thread's sandbox for in_sandbox runs: made from the agent's template on first use, resumed when paused or stopped. */
async function threadSandbox(ctx: Ctx, threadId: string, agent: AgentRow, template?: string): Promise<string> {
  const link = await exec(ctx).selectFrom('thread_sandboxes').select('sandbox_id').where('thread_id', '=', threadId).executeTakeFirst();
  if (link) {
    const sbx = await getSandbox(ctx, link.sandbox_id).catch(() => null);
    if (sbx?.state === 'running') return sbx.id;
    if (sbx && (sbx.state === 'paused' || sbx.state === 'stopped')) return (await resumeSandbox(ctx, sbx.id)).id;
  }
  const sbx = await createSandbox(ctx, {
    template: template ?? agent.sandbox_template ?? 'base-ubuntu',
    name: `thread-${threadId.slice(-8).toLowerCase()}`,
    metadata: { threadId, agent: agent.slug },
    network: true,
  });
  // The swap and its activity row are one transaction: a reader never sees the thread without a sandbox link.
  await withTx(ctx, async (tx) => {
    await exec(tx).deleteFrom('thread_sandboxes').where('thread_id', '=', threadId).execute();
    await exec(tx).insertInto('thread_sandboxes').values({ thread_id: threadId, sandbox_id: sbx.id }).execute();
    await recordActivity(tx, {
      resourceType: 'thread',
      resourceId: threadId,
      threadId,
      sandboxId: sbx.id,
      eventType: 'thread.sandbox.attached',
      status: 'completed',
      title: `Sandbox ${sbx.id} attached to the thread`,
      metadata: link ? { replaced: link.sandbox_id } : undefined,
    });
  });
  return sbx.id;
}

/**
 * Ends the run active on a thread that is being deleted (registered with the threads domain by buildApp). Whoever
 * may delete the thread (its owner or an organization admin, checked there) may end its run, whoever started it;
 * a run that ended meanwhile is fine.
 */
export async function cancelRunOfDeletedThread(ctx: Ctx, runId: string): Promise<void> {
  const row = await exec(ctx)
    .selectFrom('agent_runs')
    .select('created_by_user_id')
    .where('id', '=', runId)
    .where('org_id', '=', orgId(ctx))
    .executeTakeFirst();
  if (!row) return;
  const asStarter: Ctx = { ...ctx, principal: { ...ctx.principal, userId: row.created_by_user_id } };
  await cancelRun(asStarter, runId).catch((err) => {
    if (!(err instanceof AppError && err.code === 'invalid_state')) throw err;
  });
}

/**
 * POST /v1/run: an agent run on a thread. `managed` runs think with the agent's model and have no sandbox tools;
 * `in_sandbox` runs act through tools in the thread's sandbox; `local-desktop` runs are registered for the
 * device mesh (status `registered`). Every frame goes into the thread through the same paths as any writer
 * (durable ones through appendDurable, live ones on the bus) and, for a streaming caller, to `emit`.
 */
export async function startRun(
  caller: Ctx,
  body: RunBody,
  opts: {
    emit?: (frame: RunFrame) => void;
    signal: AbortSignal;
    /** An in_sandbox run's thread sandbox is made from this template rather than the agent's (a deployment's). */
    sandboxTemplate?: string;
  },
): Promise<RunResult> {
  requireScope(caller, 'agent:run');
  // The run acts on its thread's sandbox (created, resumed, used by its tools) as the thread's owner.
  const ctx = threadSandboxCtx(caller);
  const { deps } = ctx;
  const agent = await findAgentRow(ctx, body.agent);
  const text = userText(body);
  const tools = JSON.parse(agent.tools) as string[];
  await checkCatalogueTools(ctx, agent.slug, tools);
  const mode = agent.execution_mode;
  const cfg = { ...(JSON.parse(agent.config) as RunBody['config']), ...body.config };
  if (!agent.model) throw errors.invalidField('agent', `agent "${agent.slug}" has no model; set one with PATCH /v1/agents/${agent.slug}`);
  // A device run's model is called by its device through the platform (resolved then, for the run's owner).
  const model = await resolveModel(ctx, agent.model, { field: 'agent.model' });
  if (mode === 'local-desktop') await localDispatcher(deps).check(ctx, agent.target_device_id ?? '');
  if (body.sessionId && mode === 'local-desktop')
    throw errors.invalidField('sessionId', 'context sessions are not available to local-desktop agents (their device builds the model context)');
  const runId = uuid();
  // The session is held from here to the run's end; every way out before the run starts gives it back.
  const session = body.sessionId
    ? await openSessionForRun(caller, body.sessionId, {
        runId,
        modelWindow: model.entry.contextWindow,
        onOverflow: body.sessionOptions?.onOverflow ?? 'compact',
        includeToolResults: body.sessionOptions?.includeToolResults ?? false,
      })
    : null;
  try {
    return await runOn(ctx, body, {
      agent,
      text,
      tools,
      mode,
      cfg,
      model,
      runId,
      session,
      emit: opts.emit,
      signal: opts.signal,
      sandboxTemplate: opts.sandboxTemplate,
    });
  } finally {
    await session?.release().catch(() => undefined);
  }
}

/** startRun once its agent, model and session are settled: the thread, its lock, the turns, the end. */
async function runOn(
  ctx: Ctx,
  body: RunBody,
  r: {
    agent: AgentRow;
    text: string;
    tools: string[];
    mode: string;
    cfg: RunBody['config'];
    model: Awaited<ReturnType<typeof resolveModel>>;
    runId: string;
    session: RunSession | null;
    emit?: (frame: RunFrame) => void;
    signal: AbortSignal;
    sandboxTemplate?: string;
  },
): Promise<RunResult> {
  const { deps } = ctx;
  const { agent, text, tools, mode, cfg, model, runId, session } = r;
  const opts = { emit: r.emit, signal: r.signal };

  const existing = body.threadId
    ? await findThread(ctx, body.threadId).then((t) => {
        if (t.view !== 'owner') throw errors.forbidden('only the thread’s owner can run on it');
        return t.row;
      })
    : null;
  // A run thinking with a platform model needs credits; one on the caller's own key (BYOK) does not.
  if (model?.entry.tier === 'platform') await requireCredits(ctx, orgId(ctx), `a run of agent "${agent.slug}" (platform model "${model.entry.id}")`);
  const thread = existing
    ? { id: existing.id, active_rollout_id: existing.active_rollout_id }
    : await createThread(ctx, { title: text.slice(0, 80), executionMode: mode, agentId: agent.id }).then((t) => ({
        id: t.id,
        active_rollout_id: t.activeRolloutId,
      }));
  const threadId = thread.id;
  const local = mode === 'local-desktop';
  const lockTtl = local ? deviceLockTtlMs(deps) : LOCK_TTL_MS;
  const lock = await acquireRunLock(deps, threadId, runId, lockTtl);
  if (!lock.acquired) throw threadBusy(lock.activeRunId);

  const now = nowIso();
  const row: RunRow = {
    id: runId,
    org_id: orgId(ctx),
    agent_id: agent.id,
    agent_slug: agent.slug,
    thread_id: threadId,
    rollout_id: thread.active_rollout_id,
    sandbox_id: null,
    target_device_id: agent.target_device_id,
    execution_mode: mode,
    model: agent.model,
    status: mode === 'local-desktop' ? 'registered' : 'running',
    result: null,
    error: null,
    usage: JSON.stringify(emptyUsage()),
    iterations: 0,
    node_id: deps.config.sandboxes.nodeId,
    metadata: JSON.stringify(body.metadata),
    created_by_user_id: ctx.principal.userId,
    created_at: now,
    finished_at: null,
  };
  const controller = new AbortController();
  // A caller that aborts with its own CancelledError (a deployment's timeout) gives the run's error its reason.
  const onAbort = () => controller.abort(opts.signal.reason instanceof CancelledError ? opts.signal.reason : new CancelledError());
  opts.signal.addEventListener('abort', onAbort);
  const { active } = deps.state.get(RUN_STATE);
  // A device run is not held by this process: its device's connection keeps its thread lock fresh.
  if (!local) active.set(runId, controller);
  const renew = local ? null : setInterval(() => void renewRunLock(deps, threadId, runId, LOCK_TTL_MS).catch(() => undefined), LOCK_TTL_MS / 4);

  let lastSequence = 0;
  const durable = async (frames: DurableInput[]) => {
    const events = await appendDurable(
      deps,
      threadId,
      frames.map((f) => ({ ...f, runId })),
    );
    for (const e of events) {
      lastSequence = e.sequence;
      opts.emit?.(e);
    }
    return events;
  };
  const usage = emptyUsage();
  // Live frames go out as any client's do (the threads domain's publisher), opened once the run is recorded.
  let publishLive: TransientPublisher | null = null;
  const origin = (): TransientOrigin => ({ threadId, runId, rolloutId: row.rollout_id ?? '', sequenceNumber: Math.max(1, lastSequence) });
  const live = async (frame: TransientFrame) => {
    opts.emit?.(frame);
    await publishLive?.(frame);
  };

  try {
    await withTx(ctx, async (tx) => {
      await exec(tx).insertInto('agent_runs').values(row).execute();
      await recordActivity(tx, {
        resourceType: 'agent',
        resourceId: agent.id,
        agentRunId: runId,
        threadId,
        eventType: 'agent.run.started',
        status: 'started',
        title: `Run of ${agent.slug} started`,
        metadata: { executionMode: mode, model: agent.model },
      });
    });
    if (mode === 'in_sandbox') row.sandbox_id = await threadSandbox(ctx, threadId, agent, r.sandboxTemplate);
    publishLive = await transientPublisher(ctx, threadId, row.rollout_id ?? '');
    await durable([
      {
        type: 'run_started',
        payload: {
          runId,
          agent: agent.slug,
          model: agent.model,
          executionMode: ExecutionMode.parse(mode),
          sandboxId: row.sandbox_id,
          targetDeviceId: row.target_device_id,
        },
      },
      { type: 'user_message', payload: { text } },
    ]);
    if (local) {
      const dispatch = () => localDispatcher(deps).dispatch(ctx, refOf(row));
      if (!opts.emit) {
        await dispatch();
        return toResult(row);
      }
      // Streaming: follow the device's frames until the run ends; a caller who leaves cancels it.
      await followDeviceRun(ctx, row, opts.emit, controller.signal, dispatch, finish);
      return await getRunRow(ctx, runId);
    }

    const toolResults: RunToolResult[] = [];
    const { status, finalText, maxTurns } = await runTurns(ctx, {
      row,
      agent,
      tools,
      model,
      cfg,
      signal: controller.signal,
      usage,
      io: { durable, live, origin, onToolResult: session ? (t) => toolResults.push(t) : undefined },
      sessionContext: session?.context,
    });

    const result = await finish(
      ctx,
      row,
      agent,
      { status, result: finalText, error: status === 'max_turns' ? `stopped after ${maxTurns} model turns (config.maxTurns)` : null, usage },
      durable,
    );
    await endSession(ctx, session, { threadId, status, answer: status === 'completed' ? finalText : null, toolResults });
    return result;
  } catch (err) {
    const cancelled = err instanceof CancelledError || controller.signal.aborted;
    // A failure inside the model stream (the SDK's own error) is the provider's, named as such.
    const failure = cancelled ? null : err instanceof AppError ? err : model ? providerError(err, model.entry.id) : null;
    const reason = controller.signal.reason;
    const message = cancelled
      ? reason instanceof CancelledError
        ? reason.message
        : 'the run was cancelled'
      : (failure?.message ?? (err as Error).message);
    if (!cancelled && !failure) deps.log.error({ err, runId }, 'run failed');
    const result = await finish(ctx, row, agent, { status: cancelled ? 'cancelled' : 'failed', result: null, error: message, usage }, durable).catch(
      () => null,
    );
    await endSession(ctx, session, { threadId, status: cancelled ? 'cancelled' : 'failed', answer: null, toolResults: [] });
    if (result) return result;
    throw err;
  } finally {
    if (renew) clearInterval(renew);
    opts.signal.removeEventListener('abort', onAbort);
    active.delete(runId);
    // A device run keeps its thread until it ends (its end releases the lock); a failure before dispatch ended it.
    if (!local) await releaseRunLock(deps, threadId, runId).catch(() => undefined);
  }
}

/** A run's end on its context session (its answer added back, the invocation counted); a failure there is logged, the run stands. */
async function endSession(ctx: Ctx, session: RunSession | null, out: Parameters<RunSession['finish']>[0]): Promise<void> {
  if (!session) return;
  await session
    .finish(out)
    .catch((err: unknown) => ctx.deps.log.warn({ err, sessionId: session.id }, 'a run could not record its end on its context session'));
}

/** A run's record as the API shows it, read fresh. */
async function getRunRow(ctx: Ctx, runId: string): Promise<RunResult> {
  return toResult(
    await exec(ctx).selectFrom('agent_runs').selectAll().where('id', '=', runId).where('org_id', '=', orgId(ctx)).executeTakeFirstOrThrow(),
  );
}

/** Ends a local-device run once (device completion, cancel, revocation, timeout); null when it had ended. */
/** Local-device runs never handed to the mesh, ended (the runs' job). */
export const failUndispatchedLocalRuns = (deps: Deps): Promise<number> => failUndispatchedRuns(deps, finish);

export function endLocalRun(
  deps: Deps,
  row: RunRow,
  end: { status: 'completed' | 'failed' | 'cancelled' | 'max_turns'; error: string | null; iterations?: number },
): Promise<RunResult | null> {
  return endDeviceRun(deps, row, end, finish);
}

async function finish(
  ctx: Ctx,
  row: RunRow,
  agent: Pick<AgentRow, 'id' | 'slug'>,
  end: { status: RunResult['status']; result: string | null; error: string | null; usage: RunUsage },
  durable: (frames: DurableInput[]) => Promise<DurableFrame[]>,
): Promise<RunResult> {
  const finishedAt = nowIso();
  end.usage.promptTokens = end.usage.inputTokens;
  end.usage.completionTokens = end.usage.outputTokens;
  Object.assign(row, {
    status: end.status,
    result: JSON.stringify(end.result),
    error: end.error,
    usage: JSON.stringify(end.usage),
    finished_at: finishedAt,
  });
  // The thread first (its last frame, then its lock), the run record last: whoever sees the run finished can
  // start the next one on the thread at once.
  await durable([
    { type: 'run_completed', payload: { runId: row.id, status: end.status, usage: end.usage, iterations: row.iterations, error: end.error } },
  ]);
  await releaseRunLock(ctx.deps, row.thread_id, row.id);
  const ok = end.status === 'completed';
  await withTx(ctx, async (tx) => {
    await exec(tx)
      .updateTable('agent_runs')
      .set({
        status: row.status,
        result: row.result,
        error: row.error,
        usage: row.usage,
        iterations: row.iterations,
        sandbox_id: row.sandbox_id,
        finished_at: finishedAt,
      })
      .where('id', '=', row.id)
      .execute();
    await recordActivity(tx, {
      resourceType: 'agent',
      resourceId: agent.id,
      agentRunId: row.id,
      threadId: row.thread_id,
      eventType: ok ? 'agent.run.completed' : 'agent.run.failed',
      status: ok ? 'completed' : 'failed',
      title: `Run of ${agent.slug} ${ok ? 'completed' : end.status}`,
      summary: end.error ?? undefined,
      metadata: { iterations: row.iterations, usage: end.usage, status: end.status },
    });
  });
  return toResult(row);
}

// ---- runs whose process is gone ----------------------------------------------------------------

export const ORPHANED_RUN_ERROR = 'the server stopped while this run was in progress';

/** A run ending normally releases its lock just before it writes its end: an orphan is looked at twice, this far apart. */
const ORPHAN_RECHECK_MS = 1_000;

/**
 * Whether a `running` run's process is gone: it holds its thread's run lock while it runs and renews it every
 * LOCK_TTL_MS / 4, so a lock that lapsed (or is gone, or taken over) means nobody runs it any more, on any replica.
 */
export async function isOrphaned(deps: Deps, row: RunRow): Promise<boolean> {
  const unheld = async () => !deps.state.get(RUN_STATE).active.has(row.id) && (await activeRun(deps, row.thread_id)) !== row.id;
  // A device run is its device's: the mesh's dispatch sweeper ends it (ADR 0029).
  if (row.status !== 'running' || row.execution_mode === 'local-desktop' || !(await unheld())) return false;
  await new Promise((r) => setTimeout(r, ORPHAN_RECHECK_MS));
  const now = await deps.db.kysely.selectFrom('agent_runs').select('status').where('id', '=', row.id).executeTakeFirst();
  return now?.status === 'running' && (await unheld());
}

/**
 * Finishes a run left `running` by a process that is gone as `failed` (ORPHANED_RUN_ERROR), as a run that
 * fails ends: `run_completed` through the thread's write path, its thread lock released, the record, activity
 * `agent.run.failed`. Null when another process finished it first.
 */
export async function failOrphanedRun(deps: Deps, row: RunRow): Promise<RunResult | null> {
  // Claimed first: of two replicas that find the same run, one finishes it.
  const claimed = await deps.db.kysely
    .updateTable('agent_runs')
    .set({ status: 'failed', error: ORPHANED_RUN_ERROR, finished_at: nowIso() })
    .where('id', '=', row.id)
    .where('status', '=', 'running')
    .executeTakeFirst();
  if (Number(claimed.numUpdatedRows) !== 1) return null;
  const ctx = systemCtx(deps, { userId: row.created_by_user_id, orgId: row.org_id, role: null, scopes: new Set(), apiKeyId: null });
  return finish(
    ctx,
    { ...row },
    { id: row.agent_id, slug: row.agent_slug },
    { status: 'failed', result: null, error: ORPHANED_RUN_ERROR, usage: JSON.parse(row.usage) as RunUsage },
    endingWriter(deps, row),
  );
}

/**
 * Runs in progress by status across the installation, read at each scrape of `GET /metrics` (ADR 0040), from the
 * `agent_runs_status` index; no organization label.
 */
export function registerRunMetrics(deps: Deps): void {
  deps.metrics.gauge('hangar_runs_active', 'Agent runs registered or running', ['status'], async () => {
    const rows = await deps.db.kysely
      .selectFrom('agent_runs')
      .select(['status', (eb) => eb.fn.countAll<number | string>().as('n')])
      .where('status', 'in', ['registered', 'running'])
      .groupBy('status')
      .execute();
    return rows.map((r) => [{ status: r.status }, Number(r.n)] as [{ status: string }, number]);
  });
}
