import type { Deps } from '../../platform/context.js';
import { nothingToStop, type Stoppable } from '../../platform/jobs.js';
import { stalledRuns } from './repo.js';
import { runStepJob, sendStepJob, STEP_QUEUE, type StepJob } from './runner.js';
import { CRON_QUEUE, type CronJob, ensureSchedules, fireCron } from './triggers.js';

export const SWEEP_QUEUE = 'workflows.sweep';
/** A run not moved for this long whose step waits has its step's job sent again (a no-op when the job is there). */
export const SWEEP_AFTER_MS = 60_000;
const SWEEP_LIMIT = 500;

/**
 * Workflows' queues on the job engine: step tries, cron ticks of workflow triggers, and the sweep. At start-up every
 * enabled cron trigger has its schedule, and every run waiting on a step has its job.
 */
export async function startWorkflowJobs(deps: Deps): Promise<Stoppable> {
  await deps.jobs.work<StepJob>(STEP_QUEUE, (job) => runStepJob(deps, job.data, job.signal), {
    // A handler that throws (a database outage) or whose process stopped is run again; the step's own retries are the step's.
    retryLimit: 3,
    retryDelayMs: 2000,
    // Longer than the longest step timeout (3600 s): the step's own timeout ends it first.
    timeoutMs: 3_660_000,
    concurrency: 10,
  });
  await deps.jobs.work<CronJob>(CRON_QUEUE, (job) => fireCron(deps, job.id, job.data), { retryLimit: 3, timeoutMs: 60_000 });
  await deps.jobs.work(SWEEP_QUEUE, () => resendStalled(deps, new Date(Date.now() - SWEEP_AFTER_MS).toISOString()), {
    retryLimit: 0,
    timeoutMs: 120_000,
  });
  await deps.jobs.schedule(SWEEP_QUEUE, { cron: '* * * * *', queue: SWEEP_QUEUE });
  await ensureSchedules(deps);
  await resendStalled(deps, new Date().toISOString());
  return nothingToStop;
}

/** Sends the job of each unfinished run's waiting step (its key makes this a no-op where the job exists). */
export async function resendStalled(deps: Deps, before: string): Promise<void> {
  for (const r of await stalledRuns(deps.db.kysely, before, SWEEP_LIMIT)) {
    if (r.step_status !== 'pending') continue;
    const delayMs = r.next_attempt_at ? Math.max(0, Date.parse(r.next_attempt_at) - Date.now()) : 0;
    await sendStepJob(deps, { orgId: r.org_id, runId: r.id, index: r.step_index, attempt: r.attempts + 1 }, delayMs);
  }
}
