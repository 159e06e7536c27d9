/** The workflows domain's SQL; every query of an organization's rows is scoped here. */
import type { Insertable, Selectable, Updateable } from 'kysely';
import type { WorkflowRunsTable, WorkflowStepRunsTable, WorkflowsTable, WorkflowTriggersTable, WorkflowVersionsTable } from '../../database.js';
import { exec, orgId, type Ctx } from '../../platform/context.js';
import type { Executor } from '../../platform/db/index.js';

export type WorkflowRow = Selectable<WorkflowsTable>;
export type VersionRow = Selectable<WorkflowVersionsTable>;
export type RunRow = Selectable<WorkflowRunsTable>;
export type StepRunRow = Selectable<WorkflowStepRunsTable>;
export type TriggerRow = Selectable<WorkflowTriggersTable>;

// ---- workflows and versions -------------------------------------------------------------------------------------

export const findWorkflowBySlug = (ctx: Ctx, slug: string) =>
  exec(ctx).selectFrom('workflows').selectAll().where('org_id', '=', orgId(ctx)).where('slug', '=', slug).executeTakeFirst();

export const findWorkflowById = (ctx: Ctx, id: string) =>
  exec(ctx).selectFrom('workflows').selectAll().where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();

export const listWorkflowRows = (ctx: Ctx) =>
  exec(ctx).selectFrom('workflows').selectAll().where('org_id', '=', orgId(ctx)).orderBy('slug').execute();

export const insertWorkflow = (ctx: Ctx, row: Insertable<WorkflowsTable>) => exec(ctx).insertInto('workflows').values(row).execute();

export const updateWorkflowRow = (ctx: Ctx, id: string, set: Updateable<WorkflowsTable>) =>
  exec(ctx).updateTable('workflows').set(set).where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();

/** The workflow with everything of it: its step runs, runs, triggers and versions. */
export async function deleteWorkflowRows(ctx: Ctx, id: string): Promise<number> {
  const db = exec(ctx);
  const org = orgId(ctx);
  const runIds = db.selectFrom('workflow_runs').select('id').where('org_id', '=', org).where('workflow_id', '=', id);
  await db.deleteFrom('workflow_step_runs').where('org_id', '=', org).where('run_id', 'in', runIds).execute();
  await db.deleteFrom('workflow_runs').where('org_id', '=', org).where('workflow_id', '=', id).execute();
  await db.deleteFrom('workflow_triggers').where('org_id', '=', org).where('workflow_id', '=', id).execute();
  await db.deleteFrom('workflow_versions').where('org_id', '=', org).where('workflow_id', '=', id).execute();
  const r = await db.deleteFrom('workflows').where('org_id', '=', org).where('id', '=', id).executeTakeFirst();
  return Number(r.numDeletedRows);
}

export const insertVersion = (ctx: Ctx, row: Insertable<WorkflowVersionsTable>) => exec(ctx).insertInto('workflow_versions').values(row).execute();

export const findVersion = (ctx: Ctx, workflowId: string, version: number) =>
  exec(ctx)
    .selectFrom('workflow_versions')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('workflow_id', '=', workflowId)
    .where('version', '=', version)
    .executeTakeFirst();

/** The current versions of these workflows (one query for a list). */
export const currentVersions = (ctx: Ctx, ws: readonly WorkflowRow[]) =>
  ws.length === 0
    ? Promise.resolve([] as VersionRow[])
    : exec(ctx)
        .selectFrom('workflow_versions')
        .selectAll()
        .where('org_id', '=', orgId(ctx))
        .where((eb) => eb.or(ws.map((w) => eb.and([eb('workflow_id', '=', w.id), eb('version', '=', w.version)]))))
        .execute();

// ---- runs and their steps ---------------------------------------------------------------------------------------

export const insertRun = (ctx: Ctx, row: Insertable<WorkflowRunsTable>) => exec(ctx).insertInto('workflow_runs').values(row).execute();

export const insertStepRuns = (ctx: Ctx, rows: Insertable<WorkflowStepRunsTable>[]) =>
  exec(ctx).insertInto('workflow_step_runs').values(rows).execute();

export const findRun = (ctx: Ctx, id: string) =>
  exec(ctx).selectFrom('workflow_runs').selectAll().where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();

/** A run started by a trigger event already (a cron tick's job tried again). */
export const runByDedupeKey = (ctx: Ctx, workflowId: string, key: string) =>
  exec(ctx)
    .selectFrom('workflow_runs')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('workflow_id', '=', workflowId)
    .where('dedupe_key', '=', key)
    .executeTakeFirst();

/** A workflow's runs, newest first, after the cursor (created_at, id). */
export function listRunRows(ctx: Ctx, workflowId: string, o: { status?: string; limit: number; after?: [string, string] }) {
  let q = exec(ctx).selectFrom('workflow_runs').selectAll().where('org_id', '=', orgId(ctx)).where('workflow_id', '=', workflowId);
  if (o.status) q = q.where('status', '=', o.status);
  if (o.after) {
    const [at, id] = o.after;
    q = q.where((eb) => eb.or([eb('created_at', '<', at), eb.and([eb('created_at', '=', at), eb('id', '<', id)])]));
  }
  return q.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(o.limit).execute();
}

/** Moves a run only from one of the states named (so two racing moves make one change); true when it moved. */
export async function moveRun(ctx: Ctx, id: string, from: readonly string[], set: Updateable<WorkflowRunsTable>): Promise<boolean> {
  const r = await exec(ctx)
    .updateTable('workflow_runs')
    .set(set)
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .where('status', 'in', from)
    .executeTakeFirst();
  return Number(r.numUpdatedRows) > 0;
}

export const stepRunsOf = (ctx: Ctx, runId: string) =>
  exec(ctx).selectFrom('workflow_step_runs').selectAll().where('org_id', '=', orgId(ctx)).where('run_id', '=', runId).orderBy('idx').execute();

/** Moves a step only from the state (and try count) named; true when it moved. */
export async function moveStep(
  ctx: Ctx,
  runId: string,
  idx: number,
  from: { status: readonly string[]; attempts?: number },
  set: Updateable<WorkflowStepRunsTable>,
): Promise<boolean> {
  let q = exec(ctx)
    .updateTable('workflow_step_runs')
    .set(set)
    .where('org_id', '=', orgId(ctx))
    .where('run_id', '=', runId)
    .where('idx', '=', idx)
    .where('status', 'in', from.status);
  if (from.attempts !== undefined) q = q.where('attempts', '=', from.attempts);
  const r = await q.executeTakeFirst();
  return Number(r.numUpdatedRows) > 0;
}

/** The steps of a run that ended before reaching them. */
export const skipPendingSteps = (ctx: Ctx, runId: string, at: string) =>
  exec(ctx)
    .updateTable('workflow_step_runs')
    .set({ status: 'skipped', finished_at: at, next_attempt_at: null })
    .where('org_id', '=', orgId(ctx))
    .where('run_id', '=', runId)
    .where('status', '=', 'pending')
    .execute();

/**
 * Runs of every organization that are not over and have not moved since `before`: the sweep sends their step's job
 * again (its key makes that a no-op when the job is there).
 */
export const stalledRuns = (db: Executor, before: string, limit: number) =>
  db
    .selectFrom('workflow_runs')
    .innerJoin('workflow_step_runs', (j) =>
      j.onRef('workflow_step_runs.run_id', '=', 'workflow_runs.id').onRef('workflow_step_runs.idx', '=', 'workflow_runs.step_index'),
    )
    .select([
      'workflow_runs.id',
      'workflow_runs.org_id',
      'workflow_runs.step_index',
      'workflow_step_runs.attempts',
      'workflow_step_runs.status as step_status',
      'workflow_step_runs.next_attempt_at',
    ])
    .where('workflow_runs.status', 'in', ['queued', 'running'])
    .where('workflow_runs.updated_at', '<', before)
    .orderBy('workflow_runs.updated_at')
    .limit(limit)
    .execute();

// ---- triggers ---------------------------------------------------------------------------------------------------

export const insertTrigger = (ctx: Ctx, row: Insertable<WorkflowTriggersTable>) => exec(ctx).insertInto('workflow_triggers').values(row).execute();

export const findTrigger = (ctx: Ctx, workflowId: string, id: string) =>
  exec(ctx)
    .selectFrom('workflow_triggers')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('workflow_id', '=', workflowId)
    .where('id', '=', id)
    .executeTakeFirst();

export const listTriggerRows = (ctx: Ctx, workflowId: string) =>
  exec(ctx)
    .selectFrom('workflow_triggers')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('workflow_id', '=', workflowId)
    .orderBy('created_at')
    .orderBy('id')
    .execute();

/** Any organization's webhook trigger by its slug: the public URL names it. */
export const triggerByWebhookSlug = (db: Executor, slug: string) =>
  db.selectFrom('workflow_triggers').selectAll().where('webhook_slug', '=', slug).executeTakeFirst();

/** Any organization's trigger by id: a cron tick's job names it. */
export const triggerById = (db: Executor, id: string) => db.selectFrom('workflow_triggers').selectAll().where('id', '=', id).executeTakeFirst();

/** Every cron trigger (all organizations): start-up makes sure each enabled one has its schedule. */
export const cronTriggers = (db: Executor) => db.selectFrom('workflow_triggers').selectAll().where('type', '=', 'cron').execute();

export const updateTriggerRow = (ctx: Ctx, id: string, set: Updateable<WorkflowTriggersTable>) =>
  exec(ctx).updateTable('workflow_triggers').set(set).where('org_id', '=', orgId(ctx)).where('id', '=', id).execute();

export const deleteTriggerRow = (ctx: Ctx, id: string) =>
  exec(ctx).deleteFrom('workflow_triggers').where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();
