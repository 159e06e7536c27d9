/**
 * Workflow triggers (spec "Workflow webhooks and triggers"): `webhook` triggers start a run from
 * `POST /v1/workflows/webhooks/{webhookSlug}` with `X-Webhook-Secret`; `cron` triggers start one on a schedule in an
 * IANA time zone, through the job engine's shared scheduler (one run per tick across replicas; a tick missed while
 * no process ran is run once at the next start). Both run the workflow as the trigger's creator.
 */
import { randomBytes } from 'node:crypto';
import type { Ctx, Deps } from '../../platform/context.js';
import { orgId, requireScope, withTx } from '../../platform/context.js';
import { decrypt, deriveKey, encrypt, safeEqual } from '../../platform/crypto/index.js';
import { type AppError, errors } from '../../platform/http/errors.js';
import { jsonDepth, MAX_BODY_DEPTH } from '../../platform/http/json-depth.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { cronProblem } from '../../platform/job-engine/cron.js';
import { rejectionBudget } from '../../platform/rejections.js';
import { stateKey } from '../../platform/state.js';
import { recordActivity } from '../activity/index.js';
import * as repo from './repo.js';
import type { TriggerRow, WorkflowRow } from './repo.js';
import { orgCtx } from './runner.js';
import type { CreateWorkflowTriggerBody, UpdateWorkflowTriggerBody, WorkflowTrigger } from './schemas.js';
import { createRun, workflowOf } from './service.js';

export const CRON_QUEUE = 'workflows.cron';
export interface CronJob {
  orgId: string;
  triggerId: string;
}
export const scheduleName = (triggerId: string) => `workflow-trigger:${triggerId}`;
/** Refused webhook requests recorded as activity per trigger per minute (per process). */
export const REJECTIONS_RECORDED_PER_MINUTE = 10;

const STATE = stateKey('workflows.triggers', () => ({ secretKey: null as Buffer | null }));
const secretKey = (deps: Deps): Buffer => {
  const slot = deps.state.get(STATE);
  slot.secretKey ??= deriveKey(deps.config.secretKey, 'workflows:trigger-secret');
  return slot.secretKey;
};
const secretAad = (org: string, id: string) => `workflow-trigger:${org}:${id}`;

export const webhookUrl = (deps: Deps, slug: string, origin?: string): string =>
  `${deps.config.publicBaseUrl ?? origin ?? deps.config.urls.orchestrator}/v1/workflows/webhooks/${slug}`;

function toTrigger(deps: Deps, w: WorkflowRow, t: TriggerRow, origin?: string): WorkflowTrigger {
  return {
    id: t.id,
    workflow: w.slug,
    type: t.type as WorkflowTrigger['type'],
    name: t.name,
    enabled: t.enabled === 1,
    webhookUrl: t.webhook_slug ? webhookUrl(deps, t.webhook_slug, origin) : null,
    schedule: t.schedule,
    timezone: t.timezone,
    lastFiredAt: t.last_fired_at,
    createdAt: t.created_at,
    updatedAt: t.updated_at,
  };
}

function checkCron(schedule: string, tz: string): void {
  const problem = cronProblem(schedule, tz);
  if (problem) throw errors.invalidField(problem.includes('time zone') ? 'timezone' : 'schedule', problem);
}

const cronSpec = (t: Pick<TriggerRow, 'id' | 'org_id' | 'schedule' | 'timezone'>) => ({
  cron: t.schedule!,
  tz: t.timezone ?? 'UTC',
  queue: CRON_QUEUE,
  data: { orgId: t.org_id, triggerId: t.id } satisfies CronJob,
});

/** The engine's schedule is written before the trigger (a failed write leaves nothing behind); a tick of a trigger not there does nothing. */
async function scheduleOrFail(deps: Deps, t: Pick<TriggerRow, 'id' | 'org_id' | 'schedule' | 'timezone'>): Promise<void> {
  try {
    await deps.jobs.schedule(scheduleName(t.id), cronSpec(t));
  } catch (err) {
    deps.log.error({ err, triggerId: t.id }, 'workflows: could not write a cron schedule');
    throw errors.unavailable('the schedule could not be saved; try again');
  }
}

async function unscheduleQuietly(deps: Deps, id: string): Promise<void> {
  // A schedule left behind fires once more and removes itself (its trigger is not there).
  await deps.jobs.unschedule(scheduleName(id)).catch((err) => deps.log.warn({ err, triggerId: id }, 'workflows: could not remove a cron schedule'));
}

/** POST /v1/workflows/{slug}/triggers: the webhook secret is answered here only. */
export async function createWorkflowTrigger(ctx: Ctx, slug: string, body: CreateWorkflowTriggerBody, origin?: string): Promise<WorkflowTrigger> {
  requireScope(ctx, 'workflows:write');
  // A trigger runs the workflow as its creator, later: making one is starting runs.
  requireScope(ctx, 'workflows:run');
  const w = await workflowOf(ctx, slug);
  const org = orgId(ctx);
  if (body.type === 'cron') {
    if (!body.schedule) throw errors.invalidField('schedule', 'is required for a cron trigger');
    if (body.secret !== undefined) throw errors.invalidField('secret', 'belongs to webhook triggers (a cron trigger is not called)');
    checkCron(body.schedule, body.timezone ?? 'UTC');
  } else {
    for (const f of ['schedule', 'timezone', 'input'] as const)
      if (body[f] !== undefined) throw errors.invalidField(f, 'belongs to cron triggers (a webhook trigger’s input is the request body)');
  }
  let inputJson: string | null = null;
  if (body.input !== undefined) {
    inputJson = JSON.stringify(body.input);
    if (Buffer.byteLength(inputJson) > 64 * 1024) throw errors.invalidField('input', 'is at most 64 KiB of JSON');
  }
  const id = prefixedId('wtr');
  const now = nowIso();
  const secret = body.type === 'webhook' ? (body.secret ?? randomBytes(32).toString('hex')) : null;
  const row: TriggerRow = {
    id,
    org_id: org,
    workflow_id: w.id,
    type: body.type,
    name: body.name,
    enabled: body.enabled ? 1 : 0,
    webhook_slug: body.type === 'webhook' ? `${w.slug}-${randomBytes(8).toString('hex')}` : null,
    secret_ciphertext: secret ? encrypt(secretKey(ctx.deps), secret, secretAad(org, id)) : null,
    schedule: body.type === 'cron' ? body.schedule!.trim() : null,
    timezone: body.type === 'cron' ? (body.timezone ?? 'UTC') : null,
    input: inputJson,
    created_by_user_id: ctx.principal.userId,
    scopes: JSON.stringify([...ctx.principal.scopes]),
    last_fired_at: null,
    created_at: now,
    updated_at: now,
  };
  if (row.type === 'cron' && row.enabled) await scheduleOrFail(ctx.deps, row);
  try {
    await withTx(ctx, async (tx) => {
      await repo.insertTrigger(tx, row);
      await recordActivity(tx, {
        resourceType: 'workflow',
        resourceId: w.id,
        eventType: 'workflow.trigger.created',
        status: 'succeeded',
        title: `Workflow ${w.slug}: ${body.type} trigger ${id} (${body.name}) created`,
        metadata: {
          triggerId: id,
          type: body.type,
          enabled: body.enabled,
          ...(row.schedule ? { schedule: row.schedule, timezone: row.timezone } : {}),
        },
      });
    });
  } catch (err) {
    if (row.type === 'cron') await unscheduleQuietly(ctx.deps, id);
    throw err;
  }
  return { ...toTrigger(ctx.deps, w, row, origin), ...(secret ? { secret } : {}) };
}

export async function listWorkflowTriggers(ctx: Ctx, slug: string, origin?: string): Promise<WorkflowTrigger[]> {
  requireScope(ctx, 'workflows:read');
  const w = await workflowOf(ctx, slug);
  return (await repo.listTriggerRows(ctx, w.id)).map((t) => toTrigger(ctx.deps, w, t, origin));
}

async function triggerOf(ctx: Ctx, w: WorkflowRow, id: string): Promise<TriggerRow> {
  const t = await repo.findTrigger(ctx, w.id, id);
  if (!t) throw errors.notFound('workflow trigger', id);
  return t;
}

export async function getWorkflowTrigger(ctx: Ctx, slug: string, id: string, origin?: string): Promise<WorkflowTrigger> {
  requireScope(ctx, 'workflows:read');
  const w = await workflowOf(ctx, slug);
  return toTrigger(ctx.deps, w, await triggerOf(ctx, w, id), origin);
}

/** PATCH …/triggers/{id}: name, enabled, a new secret (webhook), schedule and time zone (cron). */
export async function updateWorkflowTrigger(
  ctx: Ctx,
  slug: string,
  id: string,
  body: UpdateWorkflowTriggerBody,
  origin?: string,
): Promise<WorkflowTrigger> {
  requireScope(ctx, 'workflows:write');
  const w = await workflowOf(ctx, slug);
  const t = await triggerOf(ctx, w, id);
  if (t.type === 'webhook' && (body.schedule !== undefined || body.timezone !== undefined))
    throw errors.invalidField(body.schedule !== undefined ? 'schedule' : 'timezone', 'belongs to cron triggers');
  if (t.type === 'cron' && body.secret !== undefined) throw errors.invalidField('secret', 'belongs to webhook triggers');
  const set: Partial<TriggerRow> = { updated_at: nowIso() };
  if (body.name !== undefined) set.name = body.name;
  if (body.enabled !== undefined) set.enabled = body.enabled ? 1 : 0;
  if (body.schedule !== undefined) set.schedule = body.schedule;
  if (body.timezone !== undefined) set.timezone = body.timezone;
  if (body.secret !== undefined) set.secret_ciphertext = encrypt(secretKey(ctx.deps), body.secret, secretAad(t.org_id, t.id));
  const after = { ...t, ...set };
  if (t.type === 'cron') checkCron(after.schedule!, after.timezone ?? 'UTC');
  const scheduleChanged = t.type === 'cron' && (after.schedule !== t.schedule || after.timezone !== t.timezone || after.enabled !== t.enabled);
  if (scheduleChanged && after.enabled) await scheduleOrFail(ctx.deps, after);
  await withTx(ctx, async (tx) => {
    await repo.updateTriggerRow(tx, t.id, set);
    await recordActivity(tx, {
      resourceType: 'workflow',
      resourceId: w.id,
      eventType: 'workflow.trigger.updated',
      status: 'succeeded',
      title: `Workflow ${w.slug}: trigger ${t.id} changed`,
      metadata: { triggerId: t.id, fields: Object.keys(body).filter((k) => (body as Record<string, unknown>)[k] !== undefined) },
    });
  });
  if (scheduleChanged && !after.enabled) await unscheduleQuietly(ctx.deps, t.id);
  return toTrigger(ctx.deps, w, after, origin);
}

export async function deleteWorkflowTrigger(ctx: Ctx, slug: string, id: string): Promise<void> {
  requireScope(ctx, 'workflows:write');
  const w = await workflowOf(ctx, slug);
  const t = await triggerOf(ctx, w, id);
  await withTx(ctx, async (tx) => {
    await recordActivity(tx, {
      resourceType: 'workflow',
      resourceId: w.id,
      eventType: 'workflow.trigger.deleted',
      status: 'succeeded',
      title: `Workflow ${w.slug}: trigger ${t.id} deleted`,
      metadata: { triggerId: t.id },
    });
    const r = await repo.deleteTriggerRow(tx, t.id);
    if (Number(r.numDeletedRows) === 0) throw errors.notFound('workflow trigger', id);
  });
  if (t.type === 'cron') await unscheduleQuietly(ctx.deps, t.id);
}

/** After a workflow and its triggers were deleted: their schedules go too. */
export async function unscheduleTriggers(deps: Deps, ids: readonly string[]): Promise<void> {
  for (const id of ids) await unscheduleQuietly(deps, id);
}

// ---- firing -----------------------------------------------------------------------------------------------------

async function reject(deps: Deps, t: TriggerRow, reason: string, err: AppError): Promise<never> {
  const budget = rejectionBudget(deps, `workflow-trigger:${t.id}`, REJECTIONS_RECORDED_PER_MINUTE);
  if (budget.record)
    await withTx(orgCtx(deps, t.org_id), (tx) =>
      recordActivity(tx, {
        resourceType: 'workflow',
        resourceId: t.workflow_id,
        eventType: 'workflow.trigger.rejected',
        status: 'failed',
        severity: 'warning',
        title: `Workflow trigger ${t.id} refused a request (${reason})`,
        metadata: { triggerId: t.id, reason, ...(budget.suppressed ? { unrecordedBefore: budget.suppressed } : {}) },
      }),
    ).catch((e) => deps.log.warn({ err: e, triggerId: t.id }, 'recording a refused workflow webhook failed'));
  throw err;
}

/** Before the body is read: the webhook trigger exists (404) and is enabled (409). */
export async function admitWebhook(deps: Deps, webhookSlug: string): Promise<TriggerRow> {
  const t = await repo.triggerByWebhookSlug(deps.db.kysely, webhookSlug);
  if (t?.type !== 'webhook') throw errors.notFound('workflow webhook', webhookSlug);
  if (t.enabled !== 1) await reject(deps, t, 'disabled', errors.invalidState(`workflow trigger ${t.id} is disabled`, 'disabled'));
  return t;
}

/** A body over the limit (413) is recorded as refused too. */
export async function recordWebhookTooLarge(deps: Deps, webhookSlug: string): Promise<void> {
  const t = await repo.triggerByWebhookSlug(deps.db.kysely, webhookSlug);
  if (t) await reject(deps, t, 'too_large', errors.tooLarge('too large')).catch(() => undefined);
}

/**
 * `X-Webhook-Secret` against the trigger's secret (digests of both compared in constant time, so neither the value
 * nor its length leaks), then the body as JSON (empty: null), then a run of the workflow with it as input.
 * `Idempotency-Key` makes a retried request answer the run the first one started.
 */
export async function fireWebhook(
  deps: Deps,
  t: TriggerRow,
  headers: Record<string, string | string[] | undefined>,
  raw: Buffer,
): Promise<{ runId: string; status: string; replayed: boolean }> {
  const given = headers['x-webhook-secret'];
  const secret = t.secret_ciphertext ? decrypt(secretKey(deps), t.secret_ciphertext, secretAad(t.org_id, t.id)) : null;
  if (secret !== null && (typeof given !== 'string' || !safeEqual(given, secret)))
    await reject(deps, t, given === undefined ? 'missing_secret' : 'bad_secret', errors.unauthenticated('X-Webhook-Secret is missing or wrong'));
  let input: unknown = null;
  const text = raw.toString('utf8').trim();
  if (text) {
    try {
      input = JSON.parse(text);
    } catch {
      return reject(deps, t, 'not_json', errors.invalid('the body is not JSON'));
    }
    if (jsonDepth(input, MAX_BODY_DEPTH) > MAX_BODY_DEPTH)
      return reject(deps, t, 'too_deep', errors.invalid(`the body nests deeper than ${MAX_BODY_DEPTH} levels`));
  }
  const ctx = orgCtx(deps, t.org_id, t.created_by_user_id);
  const w = await repo.findWorkflowById(ctx, t.workflow_id);
  if (!w) throw errors.notFound('workflow webhook');
  const key = headers['idempotency-key'];
  const dedupeKey = typeof key === 'string' && key.length > 0 && key.length <= 200 ? `hook:${t.id}:${key}` : undefined;
  const at = nowIso();
  const { run, fresh } = await createRun(ctx, w, {
    input,
    userId: t.created_by_user_id,
    scopes: JSON.parse(t.scopes) as string[],
    triggerId: t.id,
    ...(dedupeKey ? { dedupeKey } : {}),
    alsoInTx: (tx) => repo.updateTriggerRow(tx, t.id, { last_fired_at: at }),
  });
  return { runId: run.id, status: run.status, replayed: !fresh };
}

/** The `workflows.cron` job: one tick of a cron trigger starts one run (the tick's job id keys it). */
export async function fireCron(deps: Deps, jobId: string, data: CronJob): Promise<void> {
  const t = await repo.triggerById(deps.db.kysely, data.triggerId);
  if (!t) {
    await unscheduleQuietly(deps, data.triggerId);
    return;
  }
  if (t.enabled !== 1 || t.type !== 'cron') return;
  const ctx = orgCtx(deps, t.org_id, t.created_by_user_id);
  const w = await repo.findWorkflowById(ctx, t.workflow_id);
  if (!w) return;
  const at = nowIso();
  await createRun(ctx, w, {
    input: t.input !== null ? JSON.parse(t.input) : { trigger: t.id, scheduledAt: at },
    userId: t.created_by_user_id,
    scopes: JSON.parse(t.scopes) as string[],
    triggerId: t.id,
    dedupeKey: `tick:${jobId}`,
    alsoInTx: (tx) => repo.updateTriggerRow(tx, t.id, { last_fired_at: at }),
  });
}

/** At start-up: every enabled cron trigger has its schedule (a crash between the two writes left one without). */
export async function ensureSchedules(deps: Deps): Promise<void> {
  for (const t of await repo.cronTriggers(deps.db.kysely)) {
    if (t.enabled === 1)
      await deps.jobs
        .schedule(scheduleName(t.id), cronSpec(t))
        .catch((err) => deps.log.warn({ err, triggerId: t.id }, 'workflows: could not restore a cron schedule'));
  }
}
