/**
 * Workflows (issue 19, ADR 0035): a named, versioned list of steps. Changing the steps makes a new version; a run
 * runs the version current when it started, one step at a time on the job engine (runner.ts). Workflows belong to
 * the organization: its members read and run them by scope.
 */
import type { Ctx } from '../../platform/context.js';
import { hasScope, orgId, requireScope, withTx } from '../../platform/context.js';
import { uniqueAs } from '../../platform/db/errors.js';
import { errors } from '../../platform/http/errors.js';
import { decodeCursor, toPage } from '../../platform/http/pagination.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { recordActivity } from '../activity/index.js';
import * as repo from './repo.js';
import type { RunRow, StepRunRow, VersionRow, WorkflowRow } from './repo.js';
import { sendStepJob } from './runner.js';
import type {
  CreateWorkflowBody,
  RunsQuery,
  RunStatus,
  StartRunBody,
  Step,
  StepRun,
  StepStatus,
  UpdateWorkflowBody,
  Workflow,
  WorkflowRun,
  WorkflowVersion,
} from './schemas.js';

/** A run's input, as JSON, is at most this large (a webhook's body limit is its own, and smaller by default). */
export const MAX_INPUT_BYTES = 1024 * 1024;

const parse = (s: string | null): unknown => (s === null ? null : JSON.parse(s));
export const stepsOf = (v: VersionRow): Step[] => JSON.parse(v.steps) as Step[];

function toWorkflow(w: WorkflowRow, v: VersionRow): Workflow {
  return {
    id: w.id,
    slug: w.slug,
    name: w.name,
    description: w.description,
    version: w.version,
    steps: stepsOf(v),
    createdAt: w.created_at,
    updatedAt: w.updated_at,
  };
}

export async function workflowOf(ctx: Ctx, slug: string): Promise<WorkflowRow> {
  const w = await repo.findWorkflowBySlug(ctx, slug);
  if (!w) throw errors.notFound('workflow', slug);
  return w;
}

async function versionOf(ctx: Ctx, w: WorkflowRow, version = w.version): Promise<VersionRow> {
  const v = await repo.findVersion(ctx, w.id, version);
  if (!v) throw errors.notFound(`version ${version} of workflow`, w.slug);
  return v;
}

/** POST /v1/workflows: version 1 of a new workflow. */
export async function createWorkflow(ctx: Ctx, body: CreateWorkflowBody): Promise<Workflow> {
  requireScope(ctx, 'workflows:write');
  const org = orgId(ctx);
  const now = nowIso();
  const w: WorkflowRow = {
    id: prefixedId('wf'),
    org_id: org,
    slug: body.slug,
    name: body.name,
    description: body.description ?? null,
    version: 1,
    created_by_user_id: ctx.principal.userId,
    created_at: now,
    updated_at: now,
  };
  const v: VersionRow = {
    workflow_id: w.id,
    version: 1,
    org_id: org,
    steps: JSON.stringify(body.steps),
    created_by_user_id: w.created_by_user_id,
    created_at: now,
  };
  await withTx(ctx, async (tx) => {
    await uniqueAs(
      () => repo.insertWorkflow(tx, w),
      () => errors.conflict(`a workflow with slug "${body.slug}" exists in this organization`),
    );
    await repo.insertVersion(tx, v);
    await recordActivity(tx, {
      resourceType: 'workflow',
      resourceId: w.id,
      eventType: 'workflow.created',
      status: 'succeeded',
      title: `Workflow ${w.slug} created (${body.steps.length} step${body.steps.length === 1 ? '' : 's'})`,
      metadata: { slug: w.slug, version: 1, steps: body.steps.map((s) => ({ name: s.name, type: s.type })) },
    });
  });
  return toWorkflow(w, v);
}

/** GET /v1/workflows: the organization's workflows by slug. */
export async function listWorkflows(ctx: Ctx): Promise<(Omit<Workflow, 'steps'> & { stepCount: number })[]> {
  requireScope(ctx, 'workflows:read');
  const ws = await repo.listWorkflowRows(ctx);
  const versions = new Map((await repo.currentVersions(ctx, ws)).map((v) => [v.workflow_id, v]));
  return ws.map((w) => {
    const v = versions.get(w.id);
    const { steps: _, ...rest } = toWorkflow(
      w,
      v ?? { workflow_id: w.id, version: w.version, org_id: w.org_id, steps: '[]', created_by_user_id: '', created_at: '' },
    );
    return { ...rest, stepCount: v ? stepsOf(v).length : 0 };
  });
}

/** GET /v1/workflows/{slug}: with the current version's steps. */
export async function getWorkflow(ctx: Ctx, slug: string): Promise<Workflow> {
  requireScope(ctx, 'workflows:read');
  const w = await workflowOf(ctx, slug);
  return toWorkflow(w, await versionOf(ctx, w));
}

/** GET /v1/workflows/{slug}/versions/{version}: the steps a version had. */
export async function getVersion(ctx: Ctx, slug: string, version: number): Promise<WorkflowVersion> {
  requireScope(ctx, 'workflows:read');
  const w = await workflowOf(ctx, slug);
  const v = await versionOf(ctx, w, version);
  return { workflowId: w.id, version: v.version, steps: stepsOf(v), createdAt: v.created_at };
}

/** PATCH /v1/workflows/{slug}: new `steps` make version N+1 (runs already started keep theirs). */
export async function updateWorkflow(ctx: Ctx, slug: string, body: UpdateWorkflowBody): Promise<Workflow> {
  requireScope(ctx, 'workflows:write');
  const w = await workflowOf(ctx, slug);
  const now = nowIso();
  return withTx(ctx, async (tx) => {
    const current = await versionOf(tx, w);
    let v = current;
    const set: Partial<WorkflowRow> = { updated_at: now };
    if (body.name !== undefined) set.name = body.name;
    if (body.description !== undefined) set.description = body.description;
    if (body.steps !== undefined && JSON.stringify(body.steps) !== current.steps) {
      v = {
        workflow_id: w.id,
        version: w.version + 1,
        org_id: w.org_id,
        steps: JSON.stringify(body.steps),
        created_by_user_id: ctx.principal.userId,
        created_at: now,
      };
      // Two racing updates both try version N+1: the second is a conflict, not a lost update.
      await uniqueAs(
        () => repo.insertVersion(tx, v),
        () => errors.conflict(`workflow ${slug} was changed at the same time; read it again and retry`),
      );
      set.version = v.version;
    }
    await repo.updateWorkflowRow(tx, w.id, set);
    await recordActivity(tx, {
      resourceType: 'workflow',
      resourceId: w.id,
      eventType: 'workflow.updated',
      status: 'succeeded',
      title: v === current ? `Workflow ${slug} changed` : `Workflow ${slug} changed: version ${v.version}`,
      metadata: { fields: Object.keys(body).filter((k) => (body as Record<string, unknown>)[k] !== undefined), version: v.version },
    });
    return toWorkflow({ ...w, ...set }, v);
  });
}

/** DELETE /v1/workflows/{slug}: with its versions, runs and triggers (runs in flight stop at their next step). */
export async function deleteWorkflow(ctx: Ctx, slug: string, afterCommit: (triggerIds: string[]) => Promise<void>): Promise<void> {
  requireScope(ctx, 'workflows:write');
  const w = await workflowOf(ctx, slug);
  const triggerIds = await withTx(ctx, async (tx) => {
    const triggers = await repo.listTriggerRows(tx, w.id);
    await recordActivity(tx, {
      resourceType: 'workflow',
      resourceId: w.id,
      eventType: 'workflow.deleted',
      status: 'succeeded',
      title: `Workflow ${slug} deleted`,
      metadata: { slug, triggers: triggers.map((t) => t.id) },
    });
    if ((await repo.deleteWorkflowRows(tx, w.id)) === 0) throw errors.notFound('workflow', slug);
    return triggers.map((t) => t.id);
  });
  await afterCommit(triggerIds);
}

// ---- runs -------------------------------------------------------------------------------------------------------

export interface RunStart {
  input: unknown;
  /** Who the steps run as, and the scopes of the credential that started it (narrowed to their role when it runs). */
  userId: string;
  scopes: readonly string[];
  triggerId?: string;
  /** One run per key per workflow (a cron tick's job). */
  dedupeKey?: string;
  /** Writes of the caller that commit with the run (a trigger's last fire). */
  alsoInTx?: (tx: Ctx) => Promise<unknown>;
}

/**
 * Creates a queued run of the workflow's current version with a pending row per step, records
 * `workflow.run.started`, and after commit sends its first step's job. `ctx` is in the workflow's organization. With
 * a `dedupeKey` already used, the run it started is answered (`fresh: false`) and nothing is written.
 */
export async function createRun(ctx: Ctx, w: WorkflowRow, start: RunStart): Promise<{ run: WorkflowRun; fresh: boolean }> {
  const inputJson = JSON.stringify(start.input ?? null);
  if (Buffer.byteLength(inputJson) > MAX_INPUT_BYTES) throw errors.tooLarge(`a workflow run's input is at most ${MAX_INPUT_BYTES} bytes of JSON`);
  const now = nowIso();
  const made = await withTx(ctx, async (tx) => {
    if (start.dedupeKey) {
      const seen = await repo.runByDedupeKey(tx, w.id, start.dedupeKey);
      if (seen) return { run: seen, fresh: false };
    }
    const v = await versionOf(tx, w);
    const steps = stepsOf(v);
    const run: RunRow = {
      id: prefixedId('wfr'),
      org_id: w.org_id,
      workflow_id: w.id,
      version: v.version,
      status: 'queued',
      input: inputJson,
      trigger_id: start.triggerId ?? null,
      dedupe_key: start.dedupeKey ?? null,
      started_by_user_id: start.userId,
      scopes: JSON.stringify(start.scopes),
      step_index: 0,
      output: null,
      error: null,
      created_at: now,
      started_at: null,
      finished_at: null,
      updated_at: now,
    };
    await repo.insertRun(tx, run);
    await repo.insertStepRuns(
      tx,
      steps.map((s, idx) => ({ run_id: run.id, idx, org_id: w.org_id, name: s.name, type: s.type, status: 'pending', attempts: 0 })),
    );
    await start.alsoInTx?.(tx);
    await recordActivity(tx, {
      resourceType: 'workflow',
      resourceId: w.id,
      eventType: 'workflow.run.started',
      status: 'started',
      title: `Workflow ${w.slug} run ${run.id} started${start.triggerId ? ` by trigger ${start.triggerId}` : ''}`,
      metadata: { runId: run.id, version: v.version, ...(start.triggerId ? { triggerId: start.triggerId } : {}) },
    });
    return { run, fresh: true };
  });
  if (made.fresh) await sendStepJob(ctx.deps, { orgId: w.org_id, runId: made.run.id, index: 0, attempt: 1 });
  return { run: toRun(w, made.run, await repo.stepRunsOf(ctx, made.run.id)), fresh: made.fresh };
}

/** POST /v1/workflows/{slug}/runs: starts a run as the caller; 202 with the run (queued). */
export async function startWorkflowRun(ctx: Ctx, slug: string, body: StartRunBody): Promise<WorkflowRun> {
  requireScope(ctx, 'workflows:run');
  const w = await workflowOf(ctx, slug);
  return (await createRun(ctx, w, { input: body.input ?? null, userId: ctx.principal.userId, scopes: [...ctx.principal.scopes] })).run;
}

function toStepRun(s: StepRunRow): StepRun {
  return {
    index: s.idx,
    name: s.name,
    type: s.type as StepRun['type'],
    status: s.status as StepStatus,
    attempts: s.attempts,
    input: parse(s.input),
    output: parse(s.output),
    error: s.error,
    startedAt: s.started_at,
    finishedAt: s.finished_at,
    nextAttemptAt: s.next_attempt_at,
  };
}

export function toRun(w: WorkflowRow, r: RunRow, steps: StepRunRow[]): WorkflowRun {
  return { ...toRunSummary(w, r), steps: steps.map(toStepRun) };
}

function toRunSummary(w: WorkflowRow, r: RunRow): Omit<WorkflowRun, 'steps'> {
  return {
    id: r.id,
    workflowId: w.id,
    workflowSlug: w.slug,
    version: r.version,
    status: r.status as RunStatus,
    input: parse(r.input),
    output: parse(r.output),
    error: r.error,
    triggerId: r.trigger_id,
    currentStep: r.step_index,
    createdAt: r.created_at,
    startedAt: r.started_at,
    finishedAt: r.finished_at,
  };
}

async function runOf(ctx: Ctx, w: WorkflowRow, runId: string): Promise<RunRow> {
  const r = await repo.findRun(ctx, runId);
  if (!r || r.workflow_id !== w.id) throw errors.notFound('workflow run', runId);
  return r;
}

/** GET /v1/workflows/{slug}/runs: newest first, paged. */
export async function listWorkflowRuns(ctx: Ctx, slug: string, q: RunsQuery) {
  requireScope(ctx, 'workflows:read');
  const w = await workflowOf(ctx, slug);
  const after = q.cursor ? (decodeCursor(q.cursor, 2) as [string, string]) : undefined;
  const rows = await repo.listRunRows(ctx, w.id, { ...(q.status ? { status: q.status } : {}), limit: q.limit + 1, ...(after ? { after } : {}) });
  const p = toPage(rows, q.limit, (r) => [r.created_at, r.id]);
  return { runs: p.items.map((r) => toRunSummary(w, r)), hasMore: p.hasMore, nextCursor: p.nextCursor };
}

/** GET /v1/workflows/{slug}/runs/{runId}: with every step's status, input, output and error. */
export async function getWorkflowRun(ctx: Ctx, slug: string, runId: string): Promise<WorkflowRun> {
  requireScope(ctx, 'workflows:read');
  const w = await workflowOf(ctx, slug);
  const r = await runOf(ctx, w, runId);
  return toRun(w, r, await repo.stepRunsOf(ctx, r.id));
}

/**
 * POST /v1/workflows/{slug}/runs/{runId}/cancel: a queued or running run ends `cancelled`; its steps not started
 * are skipped. A step already running is not interrupted: its result is recorded and nothing after it starts.
 */
export async function cancelWorkflowRun(ctx: Ctx, slug: string, runId: string): Promise<WorkflowRun> {
  requireScope(ctx, 'workflows:run');
  const w = await workflowOf(ctx, slug);
  const r = await runOf(ctx, w, runId);
  const at = nowIso();
  await withTx(ctx, async (tx) => {
    const moved = await repo.moveRun(tx, r.id, ['queued', 'running'], {
      status: 'cancelled',
      finished_at: at,
      updated_at: at,
      error: 'cancelled by a user',
    });
    if (!moved) throw errors.invalidState(`workflow run ${r.id} is already ${r.status}`, r.status);
    await repo.skipPendingSteps(tx, r.id, at);
    await recordActivity(tx, {
      resourceType: 'workflow',
      resourceId: w.id,
      eventType: 'workflow.run.cancelled',
      status: 'cancelled',
      title: `Workflow ${w.slug} run ${r.id} cancelled`,
      metadata: { runId: r.id },
    });
  });
  return getWorkflowRun(ctx, slug, runId);
}

/** Activity filters on `workflow` resources: the organization's workflows, to callers who may read them. */
export async function canSeeWorkflow(ctx: Ctx, _id: string): Promise<boolean> {
  return hasScope(ctx, 'workflows:read');
}
