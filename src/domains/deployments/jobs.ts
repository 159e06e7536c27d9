import type { Deps } from '../../platform/context.js';
import { nothingToStop, type Stoppable } from '../../platform/jobs.js';
import { INVOCATION_QUEUE, type InvocationJob, runInvocation } from './runner.js';
import { attemptDelivery, WEBHOOK_QUEUE, type WebhookJob } from './webhooks.js';

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
  return nothingToStop;
}
