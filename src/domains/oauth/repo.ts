import type { Insertable, Selectable, Updateable } from 'kysely';
import type { OAuthConfigsTable, OAuthConnectionsTable, OAuthFlowsTable } from '../../database.js';
import { exec, orgId, type Ctx } from '../../platform/context.js';

export type ConfigRow = Selectable<OAuthConfigsTable>;
export type ConnectionRow = Selectable<OAuthConnectionsTable>;
export type FlowRow = Selectable<OAuthFlowsTable>;

// ---- configs (organization-wide) ----

export const findConfig = (ctx: Ctx, provider: string) =>
  exec(ctx).selectFrom('oauth_configs').selectAll().where('org_id', '=', orgId(ctx)).where('provider', '=', provider).executeTakeFirst();

export const listConfigRows = (ctx: Ctx) =>
  exec(ctx).selectFrom('oauth_configs').selectAll().where('org_id', '=', orgId(ctx)).orderBy('provider').execute();

export const insertConfig = (ctx: Ctx, row: Insertable<OAuthConfigsTable>) => exec(ctx).insertInto('oauth_configs').values(row).execute();

export const updateConfig = (ctx: Ctx, id: string, set: Updateable<OAuthConfigsTable>) =>
  exec(ctx).updateTable('oauth_configs').set(set).where('org_id', '=', orgId(ctx)).where('id', '=', id).execute();

export const deleteConfigRow = (ctx: Ctx, id: string) =>
  exec(ctx).deleteFrom('oauth_configs').where('org_id', '=', orgId(ctx)).where('id', '=', id).execute();

/**
 * Marks every member's connections issued by an organization client `revoked` (the client was deleted or
 * replaced, so their tokens can be neither refreshed nor revoked); answers how many.
 */
export async function revokeClientConnections(ctx: Ctx, provider: string, clientId: string, why: string): Promise<number> {
  const r = await exec(ctx)
    .updateTable('oauth_connections')
    .set({ status: 'revoked', last_error: why, updated_at: new Date().toISOString() })
    .where('org_id', '=', orgId(ctx))
    .where('provider', '=', provider)
    .where('client_source', '=', 'organization')
    .where('client_id', '=', clientId)
    .where('status', '!=', 'revoked')
    .executeTakeFirst();
  return Number(r.numUpdatedRows);
}

// ---- connections (the caller's own) ----

const mine = (ctx: Ctx) =>
  exec(ctx).selectFrom('oauth_connections').selectAll().where('org_id', '=', orgId(ctx)).where('user_id', '=', ctx.principal.userId);

export const listConnectionRows = (ctx: Ctx, provider?: string) => {
  let q = mine(ctx);
  if (provider) q = q.where('provider', '=', provider);
  return q.orderBy('created_at').orderBy('id').execute();
};

export const findConnection = (ctx: Ctx, id: string) => mine(ctx).where('id', '=', id).executeTakeFirst();

/** Whether any member of the organization has a connection with this id (for telling hidden from deleted). */
export const connectionExistsInOrg = async (ctx: Ctx, id: string) =>
  Boolean(await exec(ctx).selectFrom('oauth_connections').select('id').where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst());

export const findAccountConnection = (ctx: Ctx, provider: string, accountId: string) =>
  mine(ctx).where('provider', '=', provider).where('account_id', '=', accountId).executeTakeFirst();

export const insertConnection = (ctx: Ctx, row: Insertable<OAuthConnectionsTable>) => exec(ctx).insertInto('oauth_connections').values(row).execute();

export const updateConnection = (ctx: Ctx, id: string, set: Updateable<OAuthConnectionsTable>) =>
  exec(ctx)
    .updateTable('oauth_connections')
    .set(set)
    .where('org_id', '=', orgId(ctx))
    .where('user_id', '=', ctx.principal.userId)
    .where('id', '=', id)
    .executeTakeFirst();

/** Writes refreshed tokens only over the version they were refreshed from; false when a newer write won. */
export async function updateTokensIfVersion(ctx: Ctx, id: string, version: number, set: Updateable<OAuthConnectionsTable>): Promise<boolean> {
  const r = await exec(ctx)
    .updateTable('oauth_connections')
    .set(set)
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .where('token_version', '=', version)
    .executeTakeFirst();
  return Number(r.numUpdatedRows) === 1;
}

export const deleteConnectionRow = (ctx: Ctx, id: string) =>
  exec(ctx)
    .deleteFrom('oauth_connections')
    .where('org_id', '=', orgId(ctx))
    .where('user_id', '=', ctx.principal.userId)
    .where('id', '=', id)
    .executeTakeFirst();

/** Makes `id` the caller's only default connection of `provider`. */
export async function setDefaultRow(ctx: Ctx, provider: string, id: string): Promise<void> {
  const base = () =>
    exec(ctx)
      .updateTable('oauth_connections')
      .where('org_id', '=', orgId(ctx))
      .where('user_id', '=', ctx.principal.userId)
      .where('provider', '=', provider);
  await base().set({ is_default: 0 }).where('id', '!=', id).where('is_default', '=', 1).execute();
  await base().set({ is_default: 1 }).where('id', '=', id).execute();
}

/**
 * Takes the refresh lease of a connection (one refresh at a time across replicas): succeeds only while its tokens
 * are still `version` and no unexpired lease is held.
 */
export async function takeRefreshLease(ctx: Ctx, id: string, version: number, now: string, until: string): Promise<boolean> {
  const r = await exec(ctx)
    .updateTable('oauth_connections')
    .set({ refresh_lease_until: until })
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .where('token_version', '=', version)
    .where((eb) => eb.or([eb('refresh_lease_until', 'is', null), eb('refresh_lease_until', '<', now)]))
    .executeTakeFirst();
  return Number(r.numUpdatedRows) === 1;
}

// ---- flows (bound to the user who started them) ----

export const insertFlow = (ctx: Ctx, row: Insertable<OAuthFlowsTable>) => exec(ctx).insertInto('oauth_flows').values(row).execute();

/** A flow by its state's hash, whoever asks (the callback carries no credential; the state is the proof). */
export const findFlowByState = (ctx: Pick<Ctx, 'deps' | 'trx'>, stateHash: string) =>
  (ctx.trx ?? ctx.deps.db.kysely).selectFrom('oauth_flows').selectAll().where('state_hash', '=', stateHash).executeTakeFirst();

export const findMyFlow = (ctx: Ctx, id: string, kind: FlowRow['kind']) =>
  exec(ctx)
    .selectFrom('oauth_flows')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('user_id', '=', ctx.principal.userId)
    .where('id', '=', id)
    .where('kind', '=', kind)
    .executeTakeFirst();

/** Moves a pending flow on, only if it is still as the caller read it (`updated_at`): one finisher, one poller. */
export async function advanceFlow(ctx: Pick<Ctx, 'deps' | 'trx'>, flow: FlowRow, set: Updateable<OAuthFlowsTable>): Promise<boolean> {
  const r = await (ctx.trx ?? ctx.deps.db.kysely)
    .updateTable('oauth_flows')
    .set(set)
    .where('id', '=', flow.id)
    .where('org_id', '=', flow.org_id)
    .where('status', '=', 'pending')
    .where('updated_at', '=', flow.updated_at)
    .executeTakeFirst();
  return Number(r.numUpdatedRows) === 1;
}

/** Records how a flow the caller has claimed ended. */
export const endFlow = (ctx: Ctx, id: string, set: Updateable<OAuthFlowsTable>) =>
  exec(ctx).updateTable('oauth_flows').set(set).where('org_id', '=', orgId(ctx)).where('id', '=', id).execute();

/** Forgets flows that ended (or expired) more than an hour ago. */
export async function sweepFlows(deps: Ctx['deps'], before: string): Promise<number> {
  const r = await deps.db.kysely.deleteFrom('oauth_flows').where('expires_at', '<', before).executeTakeFirst();
  return Number(r.numDeletedRows);
}
