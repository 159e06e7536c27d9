/** The triggers domain's SQL; every query of an organization's rows is scoped here. */
import type { Insertable, Selectable, Updateable } from 'kysely';
import type { TriggersTable } from '../../database.js';
import { exec, orgId, type Ctx } from '../../platform/context.js';
import type { Executor } from '../../platform/db/index.js';

export type TriggerRow = Selectable<TriggersTable>;

/** A trigger of the caller's organization, or undefined. */
export const findTrigger = (ctx: Ctx, id: string) =>
  exec(ctx).selectFrom('triggers').selectAll().where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();

/** Any organization's trigger: the invoke URL names it, and the request is verified against it. */
export const triggerById = (db: Executor, id: string) => db.selectFrom('triggers').selectAll().where('id', '=', id).executeTakeFirst();

export const listTriggerRows = (ctx: Ctx, deploymentId?: string) => {
  let q = exec(ctx).selectFrom('triggers').selectAll().where('org_id', '=', orgId(ctx));
  if (deploymentId) q = q.where('deployment_id', '=', deploymentId);
  return q.orderBy('created_at').orderBy('id').execute();
};

export const insertTrigger = (ctx: Ctx, row: Insertable<TriggersTable>) => exec(ctx).insertInto('triggers').values(row).execute();

export const updateTriggerRow = (ctx: Ctx, id: string, set: Updateable<TriggersTable>) =>
  exec(ctx).updateTable('triggers').set(set).where('org_id', '=', orgId(ctx)).where('id', '=', id).execute();

/** Moves a trigger between states only from the one named (so two racing pauses make one change). */
export const setStatusFrom = (ctx: Ctx, id: string, from: string, to: string, at: string) =>
  exec(ctx)
    .updateTable('triggers')
    .set({ status: to, updated_at: at })
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .where('status', '=', from)
    .executeTakeFirst();

export const deleteTriggerRow = (ctx: Ctx, id: string) =>
  exec(ctx).deleteFrom('triggers').where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();

/** Records a delivery id; a second one for the same trigger is a unique violation (a replay). */
export const insertDelivery = (db: Executor, row: { trigger_id: string; delivery_id: string; org_id: string; received_at: string }) =>
  db.insertInto('trigger_deliveries').values(row).execute();

/** Delivery ids older than `before` (ISO): past any sender's retry window. */
export const pruneDeliveries = (db: Executor, before: string) =>
  db.deleteFrom('trigger_deliveries').where('received_at', '<', before).executeTakeFirst();
