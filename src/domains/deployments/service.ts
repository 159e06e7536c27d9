/**
 * Deployments (issue 19, ADR 0033): an agent behind a public name, invoked over the API with bounded concurrency
 * and a timeout, reporting its invocations' ends to a signed webhook. The verbs; the invocation job is runner.ts,
 * the webhook outbox webhooks.ts.
 */
import type { Ctx, Deps } from '../../platform/context.js';
import { orgId, requireAnyScope, requireScope, withTx } from '../../platform/context.js';
import { uniqueAs } from '../../platform/db/errors.js';
import { AppError, errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { stateKey } from '../../platform/state.js';
import { recordActivity } from '../activity/index.js';
import { getAgent } from '../agents/index.js';
import { getRun } from '../runs/index.js';
import { resolveTemplate } from '../templates/index.js';
import * as repo from './repo.js';
import type { AttemptRow, DeliveryRow, DeploymentRow, InvocationRow } from './repo.js';
import { sendInvocationJob } from './runner.js';
import type {
  CreateDeploymentBody,
  Delivery,
  Deployment,
  Invocation,
  InvocationStatus,
  InvokeBody,
  PageQuery,
  UpdateDeploymentBody,
} from './schemas.js';
import { eventsOf, newSecret, redeliveryJob, sealSecret, sendDeliveryJob } from './webhooks.js';

const TERMINAL: readonly string[] = ['completed', 'failed', 'cancelled', 'timed_out'];

export function toDeployment(ctx: Ctx, row: DeploymentRow, origin?: string, secret?: string): Deployment {
  const base = ctx.deps.config.publicBaseUrl ?? origin ?? ctx.deps.config.urls.orchestrator;
  return {
    id: row.id,
    apiSlug: row.api_slug,
    runtimeSlug: row.agent_slug,
    templateSlug: row.template_slug,
    webhookUrl: row.webhook_url,
    webhookEvents: eventsOf(row),
    webhookStatus: !row.webhook_url ? 'none' : row.webhook_disabled_at ? 'disabled' : 'active',
    webhookDisabledReason: row.webhook_disabled_reason,
    webhookDisabledAt: row.webhook_disabled_at,
    ...(secret ? { webhookSecret: secret } : {}),
    maxConcurrent: row.max_concurrent,
    timeout: row.timeout_seconds,
    invokeUrl: `${base}/v1/deployments/${row.api_slug}/invoke`,
    createdByUserId: row.created_by_user_id,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

export function toInvocation(row: InvocationRow): Invocation {
  return {
    id: row.id,
    deploymentId: row.deployment_id,
    status: row.status as InvocationStatus,
    source: row.source,
    input: row.input,
    runId: row.run_id,
    threadId: row.thread_id,
    error: row.error,
    createdByUserId: row.created_by_user_id,
    createdAt: row.created_at,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
  };
}

function toDelivery(row: DeliveryRow, attempts?: AttemptRow[]): Delivery {
  return {
    id: row.id,
    deploymentId: row.deployment_id,
    eventType: row.event_type,
    status: row.status as Delivery['status'],
    attempts: row.attempts,
    nextAttemptAt: row.status === 'pending' ? row.next_attempt_at : null,
    lastStatusCode: row.last_status_code,
    lastError: row.last_error,
    payload: JSON.parse(row.payload),
    createdAt: row.created_at,
    deliveredAt: row.delivered_at,
    ...(attempts
      ? { attemptLog: attempts.map((a) => ({ attempt: a.attempt, statusCode: a.status_code, error: a.error, durationMs: a.duration_ms, at: a.at })) }
      : {}),
  };
}

const slugTaken = (slug: string) => errors.conflict(`a deployment named "${slug}" already exists in this organization (apiSlug is unique)`);

async function deploymentRow(ctx: Ctx, idOrSlug: string): Promise<DeploymentRow> {
  const row = await repo.findDeployment(ctx, idOrSlug);
  if (!row) throw errors.notFound('deployment', idOrSlug);
  return row;
}

/** The template must exist for the organization (its own or the system's). */
async function checkTemplate(ctx: Ctx, slug: string): Promise<void> {
  await resolveTemplate(ctx, slug).catch((err) => {
    if (err instanceof AppError && err.code === 'not_found') throw errors.invalidField('templateSlug', `no template "${slug}"`);
    throw err;
  });
}

async function checkAgent(ctx: Ctx, slug: string): Promise<string> {
  return getAgent(ctx, slug)
    .then((a) => a.slug)
    .catch((err) => {
      if (err instanceof AppError && err.code === 'not_found') throw errors.invalidField('runtimeSlug', `no agent "${slug}"`);
      throw err;
    });
}

/** POST /v1/deployments: an agent behind a unique apiSlug; its signing secret is shown in this answer only. */
export async function createDeployment(ctx: Ctx, body: CreateDeploymentBody, origin?: string): Promise<Deployment> {
  requireScope(ctx, 'deployments:write');
  const org = orgId(ctx);
  const agentSlug = await checkAgent(ctx, body.runtimeSlug);
  if (body.templateSlug) await checkTemplate(ctx, body.templateSlug);
  if (await repo.findDeployment(ctx, body.apiSlug)) throw slugTaken(body.apiSlug);
  const id = prefixedId('dep');
  const secret = newSecret();
  const now = nowIso();
  const row: DeploymentRow = {
    id,
    org_id: org,
    created_by_user_id: ctx.principal.userId,
    api_slug: body.apiSlug,
    agent_slug: agentSlug,
    template_slug: body.templateSlug ?? null,
    webhook_url: body.webhookUrl ?? null,
    webhook_events: JSON.stringify(body.webhookEvents),
    webhook_secret_ciphertext: sealSecret(ctx.deps, org, id, secret),
    webhook_previous_secret_ciphertext: null,
    webhook_previous_until: null,
    webhook_disabled_at: null,
    webhook_disabled_reason: null,
    max_concurrent: body.maxConcurrent,
    timeout_seconds: body.timeout,
    created_at: now,
    updated_at: now,
  };
  await withTx(ctx, async (tx) => {
    await uniqueAs(
      () => repo.insertDeployment(tx, row),
      () => slugTaken(body.apiSlug),
    );
    await recordActivity(tx, {
      resourceType: 'deployment',
      resourceId: id,
      eventType: 'deployment.created',
      status: 'succeeded',
      title: `Deployment ${body.apiSlug} of ${agentSlug} created`,
      metadata: { apiSlug: body.apiSlug, runtimeSlug: agentSlug, webhook: Boolean(body.webhookUrl) },
    });
  });
  return toDeployment(ctx, row, origin, secret);
}

export async function listDeployments(ctx: Ctx, origin?: string): Promise<Deployment[]> {
  requireScope(ctx, 'deployments:read');
  return (await repo.listDeploymentRows(ctx)).map((r) => toDeployment(ctx, r, origin));
}

export async function getDeployment(ctx: Ctx, idOrSlug: string, origin?: string): Promise<Deployment> {
  requireScope(ctx, 'deployments:read');
  return toDeployment(ctx, await deploymentRow(ctx, idOrSlug), origin);
}

/** PATCH /v1/deployments/{id}: a webhookUrl given (even the same one) re-enables a webhook disabled by a 410. */
export async function updateDeployment(ctx: Ctx, idOrSlug: string, body: UpdateDeploymentBody, origin?: string): Promise<Deployment> {
  requireScope(ctx, 'deployments:write');
  const row = await deploymentRow(ctx, idOrSlug);
  const set: Partial<DeploymentRow> = {};
  if (body.runtimeSlug !== undefined) set.agent_slug = await checkAgent(ctx, body.runtimeSlug);
  if (body.templateSlug !== undefined) {
    if (body.templateSlug !== null) await checkTemplate(ctx, body.templateSlug);
    set.template_slug = body.templateSlug;
  }
  if (body.apiSlug !== undefined && body.apiSlug !== row.api_slug) {
    if (await repo.findDeployment(ctx, body.apiSlug)) throw slugTaken(body.apiSlug);
    set.api_slug = body.apiSlug;
  }
  if (body.webhookUrl !== undefined) {
    set.webhook_url = body.webhookUrl;
    set.webhook_disabled_at = null;
    set.webhook_disabled_reason = null;
  }
  if (body.webhookEvents !== undefined) set.webhook_events = JSON.stringify(body.webhookEvents);
  if (body.maxConcurrent !== undefined) set.max_concurrent = body.maxConcurrent;
  if (body.timeout !== undefined) set.timeout_seconds = body.timeout;
  set.updated_at = nowIso();
  await withTx(ctx, async (tx) => {
    await uniqueAs(
      () => repo.updateDeployment(tx, row.id, set),
      () => slugTaken(body.apiSlug ?? row.api_slug),
    );
    await recordActivity(tx, {
      resourceType: 'deployment',
      resourceId: row.id,
      eventType: 'deployment.updated',
      status: 'succeeded',
      title: `Deployment ${set.api_slug ?? row.api_slug} updated`,
      metadata: { fields: Object.keys(body), ...(row.webhook_disabled_at && body.webhookUrl ? { webhookReenabled: true } : {}) },
    });
  });
  return toDeployment(ctx, { ...row, ...set }, origin);
}

/** DELETE /v1/deployments/{id}: its invocations and deliveries go with it (runs already made stay). */
/** What another domain does, in the deleting transaction, when a deployment it refers to is deleted. */
export type DeploymentDeletedHook = (tx: Ctx, deploymentId: string) => Promise<void>;
const DELETED_HOOKS = stateKey('deployments.deletedHooks', () => [] as DeploymentDeletedHook[]);

/** Registered by app.ts: e.g. triggers delete theirs (with their own activity) when their deployment goes. */
export function onDeploymentDeleted(deps: Deps, hook: DeploymentDeletedHook): void {
  deps.state.get(DELETED_HOOKS).push(hook);
}

export async function deleteDeployment(ctx: Ctx, idOrSlug: string): Promise<void> {
  requireScope(ctx, 'deployments:write');
  const row = await deploymentRow(ctx, idOrSlug);
  await withTx(ctx, async (tx) => {
    for (const hook of ctx.deps.state.get(DELETED_HOOKS)) await hook(tx, row.id);
    await repo.deleteDeploymentRow(tx, row.id);
    await recordActivity(tx, {
      resourceType: 'deployment',
      resourceId: row.id,
      eventType: 'deployment.deleted',
      status: 'succeeded',
      title: `Deployment ${row.api_slug} deleted`,
      metadata: { apiSlug: row.api_slug, runtimeSlug: row.agent_slug },
    });
  });
}

/** POST …/webhook-secret/rotate: a new secret (shown once); the previous one still signs for the overlap. */
export async function rotateWebhookSecret(ctx: Ctx, idOrSlug: string, origin?: string): Promise<Deployment> {
  requireScope(ctx, 'deployments:write');
  const row = await deploymentRow(ctx, idOrSlug);
  const secret = newSecret();
  const now = nowIso();
  const set: Partial<DeploymentRow> = {
    webhook_secret_ciphertext: sealSecret(ctx.deps, row.org_id, row.id, secret),
    webhook_previous_secret_ciphertext: row.webhook_secret_ciphertext,
    webhook_previous_until: new Date(Date.now() + ctx.deps.config.deployments.secretOverlapSeconds * 1000).toISOString(),
    updated_at: now,
  };
  await withTx(ctx, async (tx) => {
    await repo.updateDeployment(tx, row.id, set);
    await recordActivity(tx, {
      resourceType: 'deployment',
      resourceId: row.id,
      eventType: 'deployment.webhook.secret_rotated',
      status: 'succeeded',
      title: `Webhook secret of ${row.api_slug} rotated`,
      metadata: { previousValidUntil: set.webhook_previous_until },
    });
  });
  return toDeployment(ctx, { ...row, ...set }, origin, secret);
}

/** Adds the run's answer and usage for the invoker (other readers see the invocation only). */
async function withRun(ctx: Ctx, inv: Invocation): Promise<Invocation> {
  if (!inv.runId || inv.createdByUserId !== ctx.principal.userId) return inv;
  const run = await getRun(ctx, inv.runId).catch(() => null);
  return run ? { ...inv, result: run.result ?? null, usage: run.usage } : inv;
}

/**
 * POST …/invoke: records the invocation `queued` and sends its job; the job runs it as the invoker when the
 * deployment has a free slot. More than HANGAR_DEPLOYMENTS_MAX_QUEUED waiting is 429. With `wait`, answers at its end.
 */
export async function invokeDeployment(ctx: Ctx, idOrSlug: string, body: InvokeBody): Promise<{ invocation: Invocation; ended: boolean }> {
  requireScope(ctx, 'deployments:invoke');
  const row = await deploymentRow(ctx, idOrSlug);
  const input = typeof body.input === 'string' ? body.input : JSON.stringify(body.input);
  const inv = await enqueueInvocation(ctx, row, { input, source: 'api', triggerId: null, threadId: body.threadId ?? null });
  const id = inv.id;
  if (!body.wait) return { invocation: toInvocation(inv), ended: false };
  // Polled, so that it works whichever replica runs the invocation.
  const deadline = Date.now() + (row.timeout_seconds + 15) * 1000;
  let current = inv;
  while (Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    current = (await repo.invocationById(ctx, id)) ?? current;
    if (TERMINAL.includes(current.status)) return { invocation: await withRun(ctx, toInvocation(current)), ended: true };
  }
  return { invocation: toInvocation(current), ended: false };
}

/**
 * Records an invocation `queued` (429 past HANGAR_DEPLOYMENTS_MAX_QUEUED waiting) and, after commit, sends its job.
 */
async function enqueueInvocation(
  ctx: Ctx,
  row: DeploymentRow,
  o: {
    input: string;
    source: 'api' | 'trigger';
    triggerId: string | null;
    threadId: string | null;
    /** The caller's own writes, made in the invocation's transaction (all or none). */
    alsoInTx?: (tx: Ctx, invocationId: string) => Promise<void>;
  },
): Promise<InvocationRow> {
  const id = prefixedId('dpi');
  const now = nowIso();
  const inv: InvocationRow = {
    id,
    org_id: orgId(ctx),
    deployment_id: row.id,
    created_by_user_id: ctx.principal.userId,
    scopes: JSON.stringify([...ctx.principal.scopes]),
    source: o.source,
    trigger_id: o.triggerId,
    input: o.input,
    status: 'queued',
    run_id: null,
    thread_id: o.threadId,
    error: null,
    created_at: now,
    started_at: null,
    finished_at: null,
    slot_wait_since: null,
  };
  const max = ctx.deps.config.deployments.maxQueued;
  await withTx(ctx, async (tx) => {
    // The deployment's row lock orders this count against other replicas' invokes.
    await repo.lockDeployment(tx, row.id);
    if ((await repo.countInvocations(tx, row.id, 'queued')) >= max)
      throw errors.rateLimited(`deployment ${row.api_slug} already has ${max} invocations waiting for a free slot; try again later`, 1);
    await repo.insertInvocation(tx, inv);
    await recordActivity(tx, {
      resourceType: 'deployment',
      resourceId: row.id,
      eventType: 'deployment.invoked',
      status: 'started',
      title: `Deployment ${row.api_slug} invoked`,
      metadata: { invocationId: id, source: o.source, ...(o.triggerId ? { triggerId: o.triggerId } : {}) },
    });
    await o.alsoInTx?.(tx, id);
  });
  await sendInvocationJob(ctx.deps, inv.org_id, id);

  return inv;
}

/** What triggers fire deployments through (registered with the triggers domain by app.ts). */
export const triggerInvoker = {
  /** A deployment of the caller's organization by id or apiSlug, or null. */
  async find(ctx: Ctx, idOrSlug: string): Promise<{ id: string; apiSlug: string } | null> {
    requireAnyScope(ctx, ['triggers:read', 'triggers:write']);
    const row = await repo.findDeployment(ctx, idOrSlug);
    return row ? { id: row.id, apiSlug: row.api_slug } : null;
  },
  /**
   * Fires the deployment as the trigger's creator (ctx): an invocation from the trigger, queued like any. The
   * trigger's own writes (its delivery id, its activity) go in the invocation's transaction through `alsoInTx`:
   * one commit, and a refusal (429, a replayed delivery) leaves neither.
   */
  async invoke(
    ctx: Ctx,
    deploymentId: string,
    o: { input: string; triggerId: string; alsoInTx?: (tx: Ctx, invocationId: string) => Promise<void> },
  ): Promise<{ id: string; status: string }> {
    requireScope(ctx, 'deployments:invoke');
    const row = await deploymentRow(ctx, deploymentId);
    const inv = await enqueueInvocation(ctx, row, {
      input: o.input,
      source: 'trigger',
      triggerId: o.triggerId,
      threadId: null,
      ...(o.alsoInTx ? { alsoInTx: o.alsoInTx } : {}),
    });
    return { id: inv.id, status: inv.status };
  },
};

export async function listInvocations(ctx: Ctx, idOrSlug: string, query: PageQuery) {
  requireScope(ctx, 'deployments:read');
  const row = await deploymentRow(ctx, idOrSlug);
  const p = await repo.invocationPage(ctx, row.id, query);
  return { items: p.items.map(toInvocation), hasMore: p.hasMore, nextCursor: p.nextCursor };
}

export async function getInvocation(ctx: Ctx, idOrSlug: string, invocationId: string): Promise<Invocation> {
  requireScope(ctx, 'deployments:read');
  const row = await deploymentRow(ctx, idOrSlug);
  const inv = await repo.findInvocation(ctx, row.id, invocationId);
  if (!inv) throw errors.notFound('invocation', invocationId);
  return withRun(ctx, toInvocation(inv));
}

export async function listDeliveries(ctx: Ctx, idOrSlug: string, query: PageQuery) {
  requireScope(ctx, 'deployments:read');
  const row = await deploymentRow(ctx, idOrSlug);
  const p = await repo.deliveryPage(ctx, row.id, query);
  return { items: p.items.map((d) => toDelivery(d)), hasMore: p.hasMore, nextCursor: p.nextCursor };
}

export async function getDelivery(ctx: Ctx, idOrSlug: string, deliveryId: string): Promise<Delivery> {
  requireScope(ctx, 'deployments:read');
  const row = await deploymentRow(ctx, idOrSlug);
  const d = await repo.findDelivery(ctx, row.id, deliveryId);
  if (!d) throw errors.notFound('delivery', deliveryId);
  return toDelivery(d, await repo.attemptsOf(ctx, d.id));
}

/** POST …/deliveries/{id}/redeliver: one more attempt of the same delivery (same webhook-id, same payload). */
export async function redeliver(ctx: Ctx, idOrSlug: string, deliveryId: string): Promise<Delivery> {
  requireScope(ctx, 'deployments:write');
  const row = await deploymentRow(ctx, idOrSlug);
  const d = await repo.findDelivery(ctx, row.id, deliveryId);
  if (!d) throw errors.notFound('delivery', deliveryId);
  if (!row.webhook_url || row.webhook_disabled_at)
    throw errors.invalidState(
      'the deployment’s webhook is disabled or has no URL: set webhookUrl with PATCH first',
      row.webhook_url ? 'disabled' : 'none',
    );
  if (d.status === 'pending') throw errors.invalidState('the delivery is still being attempted', d.status);
  const job = await withTx(ctx, async (tx) => {
    const j = await redeliveryJob(tx, d);
    await recordActivity(tx, {
      resourceType: 'deployment',
      resourceId: row.id,
      eventType: 'deployment.webhook.redelivered',
      status: 'started',
      title: `Webhook ${d.event_type} of ${row.api_slug} redelivered`,
      metadata: { deliveryId: d.id, attempt: j.attempt },
    });
    return j;
  });
  await sendDeliveryJob(ctx.deps, job);
  return toDelivery({ ...d, status: 'pending' });
}

/** Activity filters on `deployment` resources: the organization's deployments, readable with deployments:read. */
export async function canSeeDeployment(ctx: Ctx, id: string): Promise<boolean> {
  return Boolean(await repo.findDeployment(ctx, id));
}
