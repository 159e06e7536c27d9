/**
 * The `deployments.invocation` job: claims one of the deployment's `maxConcurrent` slots (in a transaction that
 * locks the deployment's row first, so replicas count the same `running` set), runs the agent as the invoker with
 * the deployment's timeout, and records the end with its webhook deliveries in the same transaction.
 */
import type { Ctx, Deps } from '../../platform/context.js';
import { withTx } from '../../platform/context.js';
import { nowIso } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';
import { laterMemberCtx } from '../organizations/index.js';
import { CancelledError, startRun } from '../runs/index.js';
import * as repo from './repo.js';
import type { DeploymentRow, InvocationRow } from './repo.js';
import type { InvocationStatus, WebhookEvent } from './schemas.js';
import { enqueueDelivery, orgCtx, sendDeliveryJob, sendOrLeaveForSweep, type WebhookJob } from './webhooks.js';

export const INVOCATION_QUEUE = 'deployments.invocation';
/**
 * How long an invocation waiting for a slot waits before it looks again by itself. A slot freed wakes the oldest
 * waiting invocation at once (wakeNext); this look only makes good a wake that was lost (another replica stopped).
 */
export const SLOT_RETRY_MS = 5000;

export interface InvocationJob {
  orgId: string;
  invocationId: string;
}

/** After commit: an invocation's first job (keyed by its id); a failed send is left to the sweep. */
export const sendInvocationJob = (deps: Deps, orgId: string, invocationId: string): Promise<void> =>
  sendOrLeaveForSweep(deps, { invocationId }, () => deps.jobs.send(INVOCATION_QUEUE, { orgId, invocationId }, { key: invocationId }));

type RunOutcome = {
  status: Exclude<InvocationStatus, 'queued' | 'running'>;
  runId: string | null;
  threadId: string | null;
  result: unknown;
  error: string | null;
  usage: Record<string, number> | null;
};

const EVENT_OF: Record<RunOutcome['status'], WebhookEvent> = {
  completed: 'run.completed',
  failed: 'run.failed',
  cancelled: 'run.cancelled',
  timed_out: 'run.timed_out',
};

const payloadOf = (dep: DeploymentRow, inv: InvocationRow, o: Partial<Omit<RunOutcome, 'status'>> & { status: string }) => ({
  deploymentId: dep.id,
  apiSlug: dep.api_slug,
  invocationId: inv.id,
  runId: o.runId ?? inv.run_id,
  threadId: o.threadId ?? inv.thread_id,
  status: o.status,
  result: o.result ?? null,
  error: o.error ?? null,
  usage: o.usage ?? null,
});

/** The invoker's context in the deployment's organization (the invoking credential's scopes within their role's now), or null for a former member. */
function invokerCtx(deps: Deps, inv: InvocationRow): Promise<Ctx | null> {
  // Invoking a deployment is running its agent: agent:run is implied, everything else is the credential's own.
  return laterMemberCtx(deps, inv.created_by_user_id, inv.org_id, [...(JSON.parse(inv.scopes) as string[]), 'agent:run']);
}

/** Takes a slot: true when the invocation is now `running`. */
async function claimSlot(ctx: Ctx, inv: InvocationRow): Promise<'claimed' | 'full' | 'gone'> {
  return withTx(ctx, async (tx) => {
    const dep = await repo.lockDeployment(tx, inv.deployment_id);
    if (!dep) return 'gone';
    if ((await repo.countInvocations(tx, dep.id, 'running')) >= dep.max_concurrent) {
      // Waiting for a slot: the next invocation to end wakes it (wakeNext).
      if (!inv.slot_wait_since) await repo.markWaitingForSlot(tx, inv.id, nowIso());
      return 'full';
    }
    const moved = await repo.moveInvocation(tx, inv.id, 'queued', { status: 'running', started_at: nowIso() });
    return moved ? 'claimed' : 'gone';
  });
}

/** Records the end (once: only from `running`) with its activity and webhook delivery; sends the delivery after commit. */
async function finish(ctx: Ctx, dep: DeploymentRow, inv: InvocationRow, o: RunOutcome): Promise<void> {
  const job = await withTx(ctx, async (tx) => {
    const moved = await repo.moveInvocation(tx, inv.id, 'running', {
      status: o.status,
      run_id: o.runId ?? inv.run_id,
      thread_id: o.threadId ?? inv.thread_id,
      error: o.error,
      finished_at: nowIso(),
    });
    if (!moved) return null;
    // The webhook as it is now (a 410 or a PATCH since the invocation started counts).
    const current = (await repo.findDeployment(tx, dep.id)) ?? dep;
    await recordActivity(tx, {
      resourceType: 'deployment',
      resourceId: dep.id,
      eventType: `deployment.invocation.${o.status}`,
      status: o.status === 'completed' ? 'succeeded' : 'failed',
      title: `Invocation of ${dep.api_slug} ${o.status.replace('_', ' ')}`,
      ...(o.runId ? { agentRunId: o.runId } : {}),
      ...(o.threadId ? { threadId: o.threadId } : {}),
      metadata: { invocationId: inv.id, runId: o.runId, error: o.error },
    });
    return enqueueDelivery(tx, current, EVENT_OF[o.status], payloadOf(current, inv, o));
  });
  await sendDeliveryJob(ctx.deps, job);
  await wakeNext(ctx, dep, inv.id);
}

/**
 * After an invocation ended (its slot free): the deployment's oldest invocations waiting for a slot, as many as slots
 * are free, are sent a job now (keyed by the one that ended, so a retry of this wakes no one twice), instead of each
 * polling for a slot. Queued invocations that never found the deployment full have their first job still coming.
 */
async function wakeNext(ctx: Ctx, dep: DeploymentRow, endedId: string): Promise<void> {
  try {
    const running = await repo.countInvocations(ctx, dep.id, 'running');
    const free = dep.max_concurrent - running;
    if (free <= 0) return;
    for (const next of await repo.oldestWaitingForSlot(ctx, dep.id, free)) {
      await ctx.deps.jobs.send(INVOCATION_QUEUE, { orgId: next.org_id, invocationId: next.id }, { key: `${next.id}:after:${endedId}` });
    }
  } catch (err) {
    // Not lost: a waiting invocation looks again by itself every SLOT_RETRY_MS.
    ctx.deps.log.warn({ err, deploymentId: dep.id }, 'deployments: could not wake the next queued invocation');
  }
}

/** The job: one attempt at running an invocation. */
export async function runInvocation(deps: Deps, data: InvocationJob, attempt: number): Promise<void> {
  const base = orgCtx(deps, data.orgId, 'system');
  const inv = await repo.invocationById(base, data.invocationId);
  if (!inv) return;
  const ctx = orgCtx(deps, data.orgId, inv.created_by_user_id);
  const dep = await repo.findDeployment(ctx, inv.deployment_id);
  if (!dep) return;
  if (inv.status === 'running') {
    // A process that stopped while running it left it here; its run was ended by the runs' own check.
    if (attempt > 1)
      await finish(ctx, dep, inv, {
        status: 'failed',
        runId: inv.run_id,
        threadId: inv.thread_id,
        result: null,
        error: 'the server running the invocation stopped before it ended',
        usage: null,
      });
    return;
  }
  if (inv.status !== 'queued') return;
  const claim = await claimSlot(ctx, inv);
  if (claim === 'full') {
    // A new job (a new key) looks again shortly; this one is done.
    await deps.jobs.send(INVOCATION_QUEUE, data, {
      key: `${inv.id}:${Date.now()}:${Math.random().toString(36).slice(2, 8)}`,
      delayMs: SLOT_RETRY_MS,
    });
    return;
  }
  if (claim === 'gone') return;
  const running = { ...inv, status: 'running' };

  const caller = await invokerCtx(deps, inv);
  if (!caller) {
    await finish(ctx, dep, running, {
      status: 'failed',
      runId: null,
      threadId: inv.thread_id,
      result: null,
      error: `the invoker (${inv.created_by_user_id}) is no longer a member of the organization, so the deployment cannot run as them`,
      usage: null,
    });
    return;
  }

  const controller = new AbortController();
  const timeoutMessage = `the run passed its deployment's timeout of ${dep.timeout_seconds} s`;
  const timer = setTimeout(() => controller.abort(new CancelledError(timeoutMessage)), dep.timeout_seconds * 1000);
  let runId: string | null = null;
  let threadId: string | null = inv.thread_id;
  const pending: Promise<unknown>[] = [];
  const onStarted = async (rid: string, tid: string) => {
    const job = await withTx(ctx, async (tx) => {
      await repo.moveInvocation(tx, inv.id, 'running', { run_id: rid, thread_id: tid });
      return enqueueDelivery(tx, dep, 'run.started', payloadOf(dep, running, { status: 'running', runId: rid, threadId: tid }));
    });
    await sendDeliveryJob(deps, job);
  };
  let outcome: RunOutcome;
  try {
    const result = await startRun(
      caller,
      {
        agent: dep.agent_slug,
        prompt: inv.input,
        stream: false,
        config: {},
        metadata: { deploymentId: dep.id, invocationId: inv.id },
        ...(inv.thread_id ? { threadId: inv.thread_id } : {}),
      },
      {
        signal: controller.signal,
        ...(dep.template_slug ? { sandboxTemplate: dep.template_slug } : {}),
        emit: (frame) => {
          if (frame.type !== 'run_started' || !('threadId' in frame) || runId) return;
          runId = frame.payload.runId;
          threadId = frame.threadId;
          pending.push(
            onStarted(frame.payload.runId, frame.threadId).catch((err) =>
              deps.log.warn({ err, invocationId: inv.id }, 'could not record an invocation’s start'),
            ),
          );
        },
      },
    );
    const timedOut =
      result.status === 'cancelled' && controller.signal.reason instanceof CancelledError && controller.signal.reason.message === timeoutMessage;
    outcome = {
      status: timedOut ? 'timed_out' : result.status === 'completed' ? 'completed' : result.status === 'cancelled' ? 'cancelled' : 'failed',
      runId: result.runId,
      threadId: result.threadId,
      result: result.result ?? null,
      error: result.error,
      usage: result.usage,
    };
  } catch (err) {
    outcome = { status: 'failed', runId, threadId, result: null, error: (err as Error).message, usage: null };
  } finally {
    clearTimeout(timer);
  }
  await Promise.all(pending);
  await finish(ctx, dep, running, outcome);
}

export type { WebhookJob };
