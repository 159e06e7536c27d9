/**
 * Agent triggers (issue 19): an inbound webhook bound to a deployment. The deployments domain is not imported: it
 * registers a `DeploymentInvoker` here (app.ts, `registerDeploymentInvoker`), through which a trigger finds its
 * deployment and fires it. The signing secret is stored encrypted and answered only when the trigger is created.
 */
import { randomBytes } from 'node:crypto';
import type { Deps } from '../../platform/context.js';
import { hasScope, orgId, requireScope, withTx, type Ctx } from '../../platform/context.js';
import { decrypt, deriveKey, encrypt } from '../../platform/crypto/index.js';
import { errors } from '../../platform/http/errors.js';
import { nowIso, prefixedId } from '../../platform/ids.js';
import { stateKey } from '../../platform/state.js';
import { recordActivity } from '../activity/index.js';
import * as repo from './repo.js';
import type { TriggerRow } from './repo.js';
import type { CreateTriggerBody, Trigger, TriggerSource, TriggersQuery, UpdateTriggerBody } from './schemas.js';

/** What triggers need of deployments; the deployments domain provides it. `ctx` is the trigger creator's. */
export interface DeploymentInvoker {
  find(ctx: Ctx, idOrApiSlug: string): Promise<{ id: string; apiSlug: string } | null>;
  /** `alsoInTx` runs in the invocation's transaction: the trigger's writes commit with it, or neither does. */
  invoke(
    ctx: Ctx,
    deploymentId: string,
    input: { input: string; triggerId: string; alsoInTx?: (tx: Ctx, invocationId: string) => Promise<void> },
  ): Promise<{ id: string; status: string }>;
}

const STATE = stateKey('triggers', () => ({ invoker: null as DeploymentInvoker | null, secretKey: null as Buffer | null }));

export function registerDeploymentInvoker(deps: Deps, invoker: DeploymentInvoker): void {
  deps.state.get(STATE).invoker = invoker;
}

export function deploymentInvoker(deps: Deps): DeploymentInvoker {
  const i = deps.state.get(STATE).invoker;
  if (!i) throw errors.unavailable('triggers need the deployments domain, which this process does not serve (orchestrator service)');
  return i;
}

/** The key sealing trigger secrets, derived once per app (each invoke opens one). */
const secretKey = (deps: Deps): Buffer => {
  const slot = deps.state.get(STATE);
  slot.secretKey ??= deriveKey(deps.config.secretKey, 'triggers:secret');
  return slot.secretKey;
};
const secretAad = (org: string, id: string) => `trigger:${org}:${id}`;

/** The trigger's signing secret (null for a row written without one: nothing can then be verified). */
export const triggerSecret = (deps: Deps, row: TriggerRow): string | null =>
  row.secret_ciphertext ? decrypt(secretKey(deps), row.secret_ciphertext, secretAad(row.org_id, row.id)) : null;

/** Where the source sends its events. */
export const invokeUrl = (deps: Deps, id: string, origin?: string): string =>
  `${deps.config.publicBaseUrl ?? origin ?? deps.config.urls.orchestrator}/v1/triggers/${id}/invoke`;

export function toTrigger(deps: Deps, row: TriggerRow, origin?: string): Trigger {
  return {
    id: row.id,
    webhookUrl: invokeUrl(deps, row.id, origin),
    deployment: row.deployment_id,
    source: row.source as TriggerSource,
    events: JSON.parse(row.events) as string[],
    message: row.message,
    allowedIps: JSON.parse(row.allowed_ips) as string[],
    repo: row.repo,
    status: row.status as Trigger['status'],
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

async function deploymentOf(ctx: Ctx, idOrSlug: string): Promise<{ id: string; apiSlug: string }> {
  const d = await deploymentInvoker(ctx.deps).find(ctx, idOrSlug);
  if (!d) throw errors.notFound('deployment', idOrSlug);
  return d;
}

async function rowOf(ctx: Ctx, id: string): Promise<TriggerRow> {
  const row = await repo.findTrigger(ctx, id);
  if (!row) throw errors.notFound('trigger', id);
  return row;
}

/** POST /v1/triggers: binds an inbound webhook to a deployment of the organization; answers the secret this once. */
export async function createTrigger(ctx: Ctx, body: CreateTriggerBody, origin?: string): Promise<Trigger> {
  requireScope(ctx, 'triggers:write');
  // A trigger fires its deployment as its creator: making one is invoking it, later.
  requireScope(ctx, 'deployments:invoke');
  const org = orgId(ctx);
  if (body.repo !== undefined && body.source !== 'code_host') throw errors.invalidField('repo', 'belongs to code_host triggers');
  const deployment = await deploymentOf(ctx, body.deployment);
  const id = prefixedId('trg');
  const secret = body.secret ?? randomBytes(32).toString('hex');
  const now = nowIso();
  const row: TriggerRow = {
    id,
    org_id: org,
    created_by_user_id: ctx.principal.userId,
    scopes: JSON.stringify([...ctx.principal.scopes]),
    deployment_id: deployment.id,
    source: body.source,
    events: JSON.stringify(body.events),
    message: body.message,
    allowed_ips: JSON.stringify(body.allowedIps),
    repo: body.repo ?? null,
    secret_ciphertext: encrypt(secretKey(ctx.deps), secret, secretAad(org, id)),
    status: 'active',
    created_at: now,
    updated_at: now,
  };
  await withTx(ctx, async (tx) => {
    await repo.insertTrigger(tx, row);
    await recordActivity(tx, {
      resourceType: 'trigger',
      resourceId: id,
      eventType: 'trigger.created',
      status: 'succeeded',
      title: `Trigger ${id} (${body.source}) created for deployment ${deployment.apiSlug}`,
      metadata: { source: body.source, deployment: deployment.id, events: body.events },
    });
  });
  return { ...toTrigger(ctx.deps, row, origin), secret };
}

/** GET /v1/triggers: the organization's triggers, oldest first; `deployment` (id or apiSlug) narrows them. */
export async function listTriggers(ctx: Ctx, query: TriggersQuery, origin?: string): Promise<Trigger[]> {
  requireScope(ctx, 'triggers:read');
  let deploymentId: string | undefined;
  if (query.deployment) {
    const d = await deploymentInvoker(ctx.deps).find(ctx, query.deployment);
    if (!d) return [];
    deploymentId = d.id;
  }
  return (await repo.listTriggerRows(ctx, deploymentId)).map((r) => toTrigger(ctx.deps, r, origin));
}

/** GET /v1/triggers/{id}: never the secret. */
export async function getTrigger(ctx: Ctx, id: string, origin?: string): Promise<Trigger> {
  requireScope(ctx, 'triggers:read');
  return toTrigger(ctx.deps, await rowOf(ctx, id), origin);
}

/** PATCH /v1/triggers/{id}: the fields given change; a new secret is stored and not answered. */
export async function updateTrigger(ctx: Ctx, id: string, body: UpdateTriggerBody, origin?: string): Promise<Trigger> {
  requireScope(ctx, 'triggers:write');
  const row = await rowOf(ctx, id);
  if (body.repo !== undefined && body.repo !== null && row.source !== 'code_host') throw errors.invalidField('repo', 'belongs to code_host triggers');
  const set: Partial<TriggerRow> = { updated_at: nowIso() };
  if (body.deployment !== undefined) set.deployment_id = (await deploymentOf(ctx, body.deployment)).id;
  if (body.events !== undefined) set.events = JSON.stringify(body.events);
  if (body.message !== undefined) set.message = body.message;
  if (body.allowedIps !== undefined) set.allowed_ips = JSON.stringify(body.allowedIps);
  if (body.repo !== undefined) set.repo = body.repo;
  if (body.secret !== undefined) set.secret_ciphertext = encrypt(secretKey(ctx.deps), body.secret, secretAad(row.org_id, row.id));
  const changed = Object.keys(body).filter((k) => (body as Record<string, unknown>)[k] !== undefined);
  await withTx(ctx, async (tx) => {
    await repo.updateTriggerRow(tx, id, set);
    await recordActivity(tx, {
      resourceType: 'trigger',
      resourceId: id,
      eventType: 'trigger.updated',
      status: 'succeeded',
      title: `Trigger ${id} changed`,
      metadata: { fields: changed },
    });
  });
  return toTrigger(ctx.deps, { ...row, ...set }, origin);
}

async function move(ctx: Ctx, id: string, from: 'active' | 'paused', to: 'active' | 'paused', origin?: string): Promise<Trigger> {
  requireScope(ctx, 'triggers:write');
  const row = await rowOf(ctx, id);
  const at = nowIso();
  await withTx(ctx, async (tx) => {
    const r = await repo.setStatusFrom(tx, id, from, to, at);
    if (Number(r.numUpdatedRows) === 0) throw errors.invalidState(`trigger ${id} is already ${to}`, to);
    await recordActivity(tx, {
      resourceType: 'trigger',
      resourceId: id,
      eventType: to === 'paused' ? 'trigger.paused' : 'trigger.resumed',
      status: 'succeeded',
      title: `Trigger ${id} ${to === 'paused' ? 'paused' : 'resumed'}`,
    });
  });
  return toTrigger(ctx.deps, { ...row, status: to, updated_at: at }, origin);
}

/** POST /v1/triggers/{id}/pause: active -> paused (its invoke URL then answers 409); already paused 409. */
export async function pauseTrigger(ctx: Ctx, id: string, origin?: string): Promise<Trigger> {
  requireScope(ctx, 'triggers:write');
  return move(ctx, id, 'active', 'paused', origin);
}

/** POST /v1/triggers/{id}/resume: paused -> active; already active 409. */
export async function resumeTrigger(ctx: Ctx, id: string, origin?: string): Promise<Trigger> {
  requireScope(ctx, 'triggers:write');
  return move(ctx, id, 'paused', 'active', origin);
}

/** DELETE /v1/triggers/{id}: its delivery ids go with it; its invoke URL then answers 404. */
export async function deleteTrigger(ctx: Ctx, id: string): Promise<void> {
  requireScope(ctx, 'triggers:write');
  await rowOf(ctx, id);
  await withTx(ctx, async (tx) => {
    await recordActivity(tx, {
      resourceType: 'trigger',
      resourceId: id,
      eventType: 'trigger.deleted',
      status: 'succeeded',
      title: `Trigger ${id} deleted`,
    });
    const r = await repo.deleteTriggerRow(tx, id);
    if (Number(r.numDeletedRows) === 0) throw errors.notFound('trigger', id);
  });
}

/**
 * In the deployment's deleting transaction (registered by app.ts with the deployments domain): its triggers go
 * with it, each recorded as `trigger.deleted` with the reason. No scope of triggers is asked: deleting the
 * deployment is what the caller was allowed to do, and a trigger cannot outlive what it fires.
 */
export async function deleteTriggersOfDeployment(tx: Ctx, deploymentId: string): Promise<void> {
  for (const t of await repo.listTriggerRows(tx, deploymentId)) {
    await recordActivity(tx, {
      resourceType: 'trigger',
      resourceId: t.id,
      eventType: 'trigger.deleted',
      status: 'succeeded',
      title: `Trigger ${t.id} deleted with its deployment`,
      metadata: { reason: 'deployment_deleted', deployment: deploymentId },
    });
    await repo.deleteTriggerRow(tx, t.id);
  }
}

/**
 * Activity filters on `trigger` resources: triggers belong to the organization (the activity is already scoped to
 * it), so a caller who may read triggers may read their events, also after one was deleted.
 */
export async function canSeeTrigger(ctx: Ctx, _id: string): Promise<boolean> {
  return hasScope(ctx, 'triggers:read');
}
