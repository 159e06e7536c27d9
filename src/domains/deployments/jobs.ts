import type { Deps } from '../../platform/context.js';
import { nothingToStop, type Stoppable } from '../../platform/jobs.js';
import { pendingWork } from './repo.js';
import { INVOCATION_QUEUE, type InvocationJob, runInvocation, sendInvocationJob } from './runner.js';
import { attemptDelivery, SWEEP_AFTER_MS, sendDeliveryJob, WEBHOOK_QUEUE, type WebhookJob } from './webhooks.js';

export const SWEEP_QUEUE = 'deployments.sweep';
/** Items a sweep sends at most (the next minute's sweep takes the rest). */
const SWEEP_LIMIT = 500;

/**
 * The deployments' queues on the job engine (started by app.ts after every domain declared its own): invocations
 * (each waits for a slot of its deployment, then runs its agent), webhook delivery attempts, and the sweep.
 */
export async function startDeploymentJobs(deps: Deps): Promise<Stoppable> {
  await deps.jobs.work<InvocationJob>(INVOCATION_QUEUE, (job) => runInvocation(deps, job.data, job.attempt), {
    // A handler that fails is tried once more, which ends an invocation its stopped process left running.
    retryLimit: 1,
    retryDelayMs: 1000,
    // Longer than the longest deployment timeout (3600 s): the run's own timeout ends it first.
    timeoutMs: 3_700_000,
    concurrency: 20,
  });
  await deps.jobs.work<WebhookJob>(WEBHOOK_QUEUE, (job) => attemptDelivery(deps, job.data), {
    // Each attempt of a delivery is a job of its own (the retry schedule is the delivery's); a crash mid-attempt is tried again.
    retryLimit: 2,
    retryDelayMs: 1000,
    timeoutMs: deps.config.deployments.webhookTimeoutMs + 30_000,
    concurrency: 10,
  });
  await deps.jobs.work(SWEEP_QUEUE, () => resendPending(deps, { before: new Date(Date.now() - SWEEP_AFTER_MS).toISOString(), limit: SWEEP_LIMIT }), {
    retryLimit: 0,
    timeoutMs: 120_000,
  });
  // Once a minute, across replicas: work committed whose job was never sent (its send failed after the commit).
  await deps.jobs.schedule(SWEEP_QUEUE, { cron: '* * * * *', queue: SWEEP_QUEUE });
  // At start-up, everything waiting: work whose job a stopped process committed but never sent.
  await resendPending(deps);
  return nothingToStop;
}

/**
 * Sends the job of each queued invocation and pending delivery (of every organization). Each job's key makes this
 * a no-op for work that has its job already (waiting, running or done), so only lost sends are made good.
 */
export async function resendPending(deps: Deps, o: { before?: string; limit?: number } = {}): Promise<void> {
  const pending = await pendingWork(deps.db.kysely, o);
  for (const i of pending.invocations) await sendInvocationJob(deps, i.org_id, i.id);
  for (const d of pending.deliveries) {
    const delayMs = d.next_attempt_at ? Math.max(0, Date.parse(d.next_attempt_at) - Date.now()) : 0;
    await sendDeliveryJob(deps, { orgId: d.org_id, deliveryId: d.id, attempt: d.attempts + 1 }, delayMs);
  }
}
