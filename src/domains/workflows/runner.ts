/**
 * The `workflows.step` job: one try of one step of one run, keyed `<runId>:<index>:<try>` so a send repeated (by a
 * replica, a retry, the sweep) is one job. A try moves its step pending -> running (only from the try before it,
 * so two jobs of one try cannot both run it), runs it, and records the outcome with the run's next move in one
 * transaction; the next job is sent after commit. A run therefore resumes from its last completed step: a process
 * that stops mid-step leaves the step `running`, and the engine's retry of that job counts the try as failed and
 * tries again (a step may thus run more than once: see ADR 0035).
 */
import type { Ctx, Deps } from '../../platform/context.js';
import { systemCtx, withTx } from '../../platform/context.js';
import { nowIso } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';
import { laterMemberCtx } from '../organizations/index.js';
import * as repo from './repo.js';
import type { RunRow, StepRunRow, WorkflowRow } from './repo.js';
import type { Step } from './schemas.js';
import { MAX_OUTPUT_BYTES, runStepOnce, type StepOutcome } from './steps.js';

export const STEP_QUEUE = 'workflows.step';
/** The longest wait between two tries of a step. */
const MAX_RETRY_DELAY_MS = 5 * 60_000;

export interface StepJob {
  orgId: string;
  runId: string;
  index: number;
  /** The step's try this job makes (1 for the first). */
  attempt: number;
}

const ENDED = new Set(['completed', 'failed', 'cancelled']);

export const orgCtx = (deps: Deps, org: string, userId = 'system'): Ctx =>
  systemCtx(deps, { userId, orgId: org, role: null, scopes: new Set(), apiKeyId: null });

/** After commit: a step's job. A failed send is logged and left to the sweep (which sends it again within minutes). */
export async function sendStepJob(deps: Deps, job: StepJob, delayMs = 0): Promise<void> {
  try {
    await deps.jobs.send(STEP_QUEUE, job, { key: `${job.runId}:${job.index}:${job.attempt}`, ...(delayMs > 0 ? { delayMs } : {}) });
  } catch (err) {
    deps.log.warn({ err, runId: job.runId, step: job.index }, 'workflows: could not send a step job; the sweep will send it');
  }
}

/** Exponential, with jitter over its upper half: 1 s, 2 s, 4 s, … up to five minutes. */
export const retryDelayMs = (attempt: number, random = Math.random): number => {
  const ceiling = Math.min(MAX_RETRY_DELAY_MS, 1000 * 2 ** Math.min(20, attempt - 1));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
};

/** The run's starter in its organization (their credential's scopes within their role now), or null for a former member. */
const starterCtx = (deps: Deps, run: RunRow): Promise<Ctx | null> =>
  laterMemberCtx(deps, run.started_by_user_id, run.org_id, JSON.parse(run.scopes) as string[]);

/** `input` (and its alias `payload`) and `steps.<name>.output` of the steps completed before `index`. */
function rootsOf(run: RunRow, rows: StepRunRow[], index: number) {
  const steps: Record<string, { output: unknown; status: string }> = {};
  for (const r of rows)
    if (r.idx < index && r.status === 'completed') steps[r.name] = { output: r.output === null ? null : JSON.parse(r.output), status: r.status };
  const input: unknown = JSON.parse(run.input);
  return { input, payload: input, steps };
}

/** The job: one try of a step. */
export async function runStepJob(deps: Deps, job: StepJob, signal: AbortSignal): Promise<void> {
  const base = orgCtx(deps, job.orgId);
  const run = await repo.findRun(base, job.runId);
  if (!run || ENDED.has(run.status) || run.step_index !== job.index) return;
  const w = await repo.findWorkflowById(base, run.workflow_id);
  const v = w ? await repo.findVersion(base, w.id, run.version) : undefined;
  if (!w || !v) return;
  const steps = JSON.parse(v.steps) as Step[];
  const step = steps[job.index];
  const rows = await repo.stepRunsOf(base, run.id);
  const row = rows[job.index];
  if (!step || !row) return;
  if (row.status === 'running' && row.attempts === job.attempt) {
    // This try began before and its process stopped (the engine runs a job again when that happens).
    await afterTry(base, w, run, step, steps.length, job, {
      ok: false,
      input: row.input === null ? null : JSON.parse(row.input),
      output: null,
      error: 'the server running this step stopped before it ended',
      retryable: true,
    });
    return;
  }
  if (row.status !== 'pending' || row.attempts !== job.attempt - 1) return;

  const now = nowIso();
  const claimed = await withTx(base, async (tx) => {
    if (!(await repo.moveRun(tx, run.id, ['queued', 'running'], { status: 'running', started_at: run.started_at ?? now, updated_at: now })))
      return false;
    return repo.moveStep(
      tx,
      run.id,
      job.index,
      { status: ['pending'], attempts: job.attempt - 1 },
      { status: 'running', attempts: job.attempt, started_at: row.started_at ?? now, next_attempt_at: null },
    );
  });
  if (!claimed) return;

  const caller = await starterCtx(deps, run);
  let outcome: StepOutcome;
  if (!caller) {
    outcome = {
      ok: false,
      input: null,
      output: null,
      error: `the run's starter (${run.started_by_user_id}) is no longer a member of the organization, so its steps cannot run as them`,
      retryable: false,
    };
  } else {
    const timeout = AbortSignal.timeout(step.timeoutSeconds * 1000);
    outcome = await runStepOnce(caller, step, rootsOf(run, rows, job.index), AbortSignal.any([timeout, signal]), {
      workflowRunId: run.id,
      step: step.name,
    });
    if (!outcome.ok && timeout.aborted) outcome = { ...outcome, error: `the step passed its timeout of ${step.timeoutSeconds} s`, retryable: true };
  }
  if (outcome.ok && Buffer.byteLength(JSON.stringify(outcome.output ?? null)) > MAX_OUTPUT_BYTES)
    outcome = { ...outcome, ok: false, output: null, error: `the step's output is over ${MAX_OUTPUT_BYTES} bytes of JSON`, retryable: false };
  await afterTry(base, w, run, step, steps.length, job, outcome);
}

/**
 * Records a try's outcome (only for the try that is running) and moves the run on: to the next step, to its end,
 * or to the step's next try after a backoff. The job it leaves to send is sent after commit.
 */
async function afterTry(base: Ctx, w: WorkflowRow, run: RunRow, step: Step, stepCount: number, job: StepJob, o: StepOutcome): Promise<void> {
  const at = nowIso();
  const json = (x: unknown) => JSON.stringify(x ?? null);
  const next = await withTx(base, async (tx): Promise<{ job: StepJob; delayMs: number } | null> => {
    const from = { status: ['running'], attempts: job.attempt };
    if (o.ok) {
      if (
        !(await repo.moveStep(tx, run.id, job.index, from, {
          status: 'completed',
          input: json(o.input),
          output: json(o.output),
          error: null,
          finished_at: at,
        }))
      )
        return null;
      if (job.index + 1 < stepCount) {
        const moved = await repo.moveRun(tx, run.id, ['running'], { step_index: job.index + 1, updated_at: at });
        return moved ? { job: { ...job, index: job.index + 1, attempt: 1 }, delayMs: 0 } : null;
      }
      if (await repo.moveRun(tx, run.id, ['running'], { status: 'completed', output: json(o.output), finished_at: at, updated_at: at }))
        await recordActivity(tx, {
          resourceType: 'workflow',
          resourceId: w.id,
          eventType: 'workflow.run.completed',
          status: 'succeeded',
          title: `Workflow ${w.slug} run ${run.id} completed`,
          metadata: { runId: run.id, version: run.version, steps: stepCount },
        });
      return null;
    }
    if (o.retryable && job.attempt <= step.retries) {
      const delayMs = retryDelayMs(job.attempt);
      const nextAt = new Date(Date.now() + delayMs).toISOString();
      if (
        !(await repo.moveStep(tx, run.id, job.index, from, {
          status: 'pending',
          input: json(o.input),
          output: json(o.output),
          error: o.error,
          next_attempt_at: nextAt,
        }))
      )
        return null;
      await repo.moveRun(tx, run.id, ['running'], { updated_at: at });
      return { job: { ...job, attempt: job.attempt + 1 }, delayMs };
    }
    if (
      !(await repo.moveStep(tx, run.id, job.index, from, {
        status: 'failed',
        input: json(o.input),
        output: json(o.output),
        error: o.error,
        finished_at: at,
      }))
    )
      return null;
    await repo.skipPendingSteps(tx, run.id, at);
    const error = `step "${step.name}" failed after ${job.attempt} ${job.attempt === 1 ? 'try' : 'tries'}: ${o.error}`;
    if (await repo.moveRun(tx, run.id, ['running', 'queued'], { status: 'failed', error, finished_at: at, updated_at: at }))
      await recordActivity(tx, {
        resourceType: 'workflow',
        resourceId: w.id,
        eventType: 'workflow.run.failed',
        status: 'failed',
        severity: 'warning',
        title: `Workflow ${w.slug} run ${run.id} failed at step ${step.name}`,
        metadata: { runId: run.id, version: run.version, step: step.name, index: job.index, attempts: job.attempt, error: o.error },
      });
    return null;
  });
  if (next) await sendStepJob(base.deps, next.job, next.delayMs);
}
