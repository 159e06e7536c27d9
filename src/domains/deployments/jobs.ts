import type { Deps } from '../../platform/context.js';
import { nothingToStop, type Stoppable } from '../../platform/jobs.js';
import { INVOCATION_QUEUE, type InvocationJob, runInvocation } from './runner.js';
import { pendingWork } from './repo.js';
import { attemptDelivery, sendDeliveryJob, WEBHOOK_QUEUE, type WebhookJob } from './webhooks.js';

/**
 * The deployments' queues on the job engine (started by app.ts after every domain declared its own): invocations
 * (each waits for a slot of its deployment, then runs its agent) and webhook delivery attempts.
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
  // Work whose job a stopped process committed but never sent: sent now (a live job's key makes this a no-op).
  const pending = await pendingWork(deps.db.kysely);
  for (const i of pending.invocations) await deps.jobs.send(INVOCATION_QUEUE, { orgId: i.org_id, invocationId: i.id }, { key: i.id });
  for (const d of pending.deliveries) {
    const delayMs = d.next_attempt_at ? Math.max(0, Date.parse(d.next_attempt_at) - Date.now()) : 0;
    await sendDeliveryJob(deps, { orgId: d.org_id, deliveryId: d.id, attempt: d.attempts + 1 }, delayMs);
  }
  return nothingToStop;
}
