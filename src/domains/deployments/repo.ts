/** The deployments domain's SQL: deployments, invocations, webhook deliveries and their attempts, every query scoped by organization. */
import type { Insertable, Selectable, Updateable } from 'kysely';
import type { DeploymentInvocationsTable, DeploymentsTable, WebhookDeliveriesTable, WebhookDeliveryAttemptsTable } from '../../database.js';
import { exec, orgId, type Ctx } from '../../platform/context.js';
import type { Executor } from '../../platform/db/index.js';
import { newestFirstPage } from '../../platform/db/pages.js';

export type DeploymentRow = Selectable<DeploymentsTable>;
export type InvocationRow = Selectable<DeploymentInvocationsTable>;
export type DeliveryRow = Selectable<WebhookDeliveriesTable>;
export type AttemptRow = Selectable<WebhookDeliveryAttemptsTable>;

/** A deployment of the caller's organization by id or apiSlug. */
export const findDeployment = (ctx: Ctx, idOrSlug: string) =>
  exec(ctx)
    .selectFrom('deployments')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where((eb) => eb.or([eb('id', '=', idOrSlug), eb('api_slug', '=', idOrSlug)]))
    .executeTakeFirst();

export const listDeploymentRows = (ctx: Ctx) =>
  exec(ctx).selectFrom('deployments').selectAll().where('org_id', '=', orgId(ctx)).orderBy('created_at').orderBy('id').execute();

export const insertDeployment = (ctx: Ctx, row: Insertable<DeploymentsTable>) => exec(ctx).insertInto('deployments').values(row).execute();

export const updateDeployment = (ctx: Ctx, id: string, set: Updateable<DeploymentsTable>) =>
  exec(ctx).updateTable('deployments').set(set).where('org_id', '=', orgId(ctx)).where('id', '=', id).execute();

export const deleteDeploymentRow = (ctx: Ctx, id: string) =>
  exec(ctx).deleteFrom('deployments').where('org_id', '=', orgId(ctx)).where('id', '=', id).execute();

/**
 * Serialises the deployment's slot accounting: a no-op UPDATE of its row, which holds the row lock on PostgreSQL
 * (and the write lock on SQLite) until the transaction ends. Returns its row as it is then.
 */
export async function lockDeployment(ctx: Ctx, id: string): Promise<DeploymentRow | undefined> {
  await exec(ctx)
    .updateTable('deployments')
    .set((eb) => ({ max_concurrent: eb.ref('max_concurrent') }))
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .execute();
  return exec(ctx).selectFrom('deployments').selectAll().where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();
}

export async function countInvocations(ctx: Ctx, deploymentId: string, status: string): Promise<number> {
  const r = await exec(ctx)
    .selectFrom('deployment_invocations')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('org_id', '=', orgId(ctx))
    .where('deployment_id', '=', deploymentId)
    .where('status', '=', status)
    .executeTakeFirst();
  return Number(r?.n ?? 0);
}

/** The deployment's oldest queued invocations that found every slot taken (the next to take a freed slot). */
export const oldestWaitingForSlot = (ctx: Ctx, deploymentId: string, limit: number) =>
  exec(ctx)
    .selectFrom('deployment_invocations')
    .select(['id', 'org_id'])
    .where('org_id', '=', orgId(ctx))
    .where('deployment_id', '=', deploymentId)
    .where('status', '=', 'queued')
    .where('slot_wait_since', 'is not', null)
    .orderBy('created_at')
    .orderBy('id')
    .limit(limit)
    .execute();

export const markWaitingForSlot = (ctx: Ctx, id: string, at: string) =>
  exec(ctx)
    .updateTable('deployment_invocations')
    .set({ slot_wait_since: at })
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .where('status', '=', 'queued')
    .execute();

export const insertInvocation = (ctx: Ctx, row: Insertable<DeploymentInvocationsTable>) =>
  exec(ctx).insertInto('deployment_invocations').values(row).execute();

export const findInvocation = (ctx: Ctx, deploymentId: string, id: string) =>
  exec(ctx)
    .selectFrom('deployment_invocations')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('deployment_id', '=', deploymentId)
    .where('id', '=', id)
    .executeTakeFirst();

export const invocationById = (ctx: Ctx, id: string) =>
  exec(ctx).selectFrom('deployment_invocations').selectAll().where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();

/** Moves an invocation on only from the state named; the number of rows moved (0 when another got there first). */
export async function moveInvocation(ctx: Ctx, id: string, from: string, set: Updateable<DeploymentInvocationsTable>): Promise<number> {
  const r = await exec(ctx)
    .updateTable('deployment_invocations')
    .set(set)
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .where('status', '=', from)
    .executeTakeFirst();
  return Number(r.numUpdatedRows);
}

export const invocationPage = (ctx: Ctx, deploymentId: string, page: { cursor?: string; limit: number }) =>
  newestFirstPage(
    exec(ctx).selectFrom('deployment_invocations').selectAll().where('org_id', '=', orgId(ctx)).where('deployment_id', '=', deploymentId),
    { time: 'created_at', id: 'id' },
    page,
  );

export const insertDelivery = (ctx: Ctx, row: Insertable<WebhookDeliveriesTable>) => exec(ctx).insertInto('webhook_deliveries').values(row).execute();

export const findDelivery = (ctx: Ctx, deploymentId: string, id: string) =>
  exec(ctx)
    .selectFrom('webhook_deliveries')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('deployment_id', '=', deploymentId)
    .where('id', '=', id)
    .executeTakeFirst();

export const deliveryById = (ctx: Ctx, id: string) =>
  exec(ctx).selectFrom('webhook_deliveries').selectAll().where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();

export const updateDelivery = (ctx: Ctx, id: string, set: Updateable<WebhookDeliveriesTable>) =>
  exec(ctx).updateTable('webhook_deliveries').set(set).where('org_id', '=', orgId(ctx)).where('id', '=', id).execute();

export const deliveryPage = (ctx: Ctx, deploymentId: string, page: { cursor?: string; limit: number }) =>
  newestFirstPage(
    exec(ctx).selectFrom('webhook_deliveries').selectAll().where('org_id', '=', orgId(ctx)).where('deployment_id', '=', deploymentId),
    { time: 'created_at', id: 'id' },
    page,
  );

export const insertAttempt = (ctx: Ctx, row: Insertable<WebhookDeliveryAttemptsTable>) =>
  exec(ctx).insertInto('webhook_delivery_attempts').values(row).execute();

export const attemptsOf = (ctx: Ctx, deliveryId: string) =>
  exec(ctx)
    .selectFrom('webhook_delivery_attempts')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('delivery_id', '=', deliveryId)
    .orderBy('attempt')
    .execute();

/**
 * Every organization's queued invocations and pending deliveries (a start-up job re-sends their jobs: a process
 * that stopped between a commit and its send lost them; the jobs' keys make a re-send of a live one a no-op).
 */
/**
 * Across organizations (the engine's start-up and sweep): invocations still `queued` and deliveries still `pending`,
 * optionally only those due before `before` (created, or next attempt due, then), oldest first, at most `limit`.
 */
export async function pendingWork(db: Executor, o: { before?: string; limit?: number } = {}) {
  let invocations = db.selectFrom('deployment_invocations').select(['id', 'org_id']).where('status', '=', 'queued');
  let deliveries = db.selectFrom('webhook_deliveries').select(['id', 'org_id', 'attempts', 'next_attempt_at']).where('status', '=', 'pending');
  if (o.before) {
    invocations = invocations.where('created_at', '<', o.before);
    deliveries = deliveries.where('next_attempt_at', '<', o.before);
  }
  if (o.limit) {
    invocations = invocations.orderBy('created_at').limit(o.limit);
    deliveries = deliveries.orderBy('next_attempt_at').limit(o.limit);
  }
  return { invocations: await invocations.execute(), deliveries: await deliveries.execute() };
}
