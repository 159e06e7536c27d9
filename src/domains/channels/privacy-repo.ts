/** SQL of channel privacy: access requests and grants, scoped by organization. */
import type { Insertable, Selectable, Updateable } from 'kysely';
import type { ChannelPrivacyGrantsTable, ChannelPrivacyRequestsTable } from '../../database.js';
import { exec, orgId, type Ctx } from '../../platform/context.js';

export type RequestRow = Selectable<ChannelPrivacyRequestsTable>;
export type GrantRow = Selectable<ChannelPrivacyGrantsTable>;

export const listRequests = (ctx: Ctx, channelId: string, status?: string) => {
  let q = exec(ctx).selectFrom('channel_privacy_requests').selectAll().where('org_id', '=', orgId(ctx)).where('channel_id', '=', channelId);
  if (status) q = q.where('status', '=', status);
  return q.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(500).execute();
};

export const findRequest = (ctx: Ctx, channelId: string, id: string) =>
  exec(ctx)
    .selectFrom('channel_privacy_requests')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('channel_id', '=', channelId)
    .where('id', '=', id)
    .executeTakeFirst();

export const requestFor = (ctx: Ctx, channelId: string, conversationId: string) =>
  exec(ctx)
    .selectFrom('channel_privacy_requests')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('channel_id', '=', channelId)
    .where('external_conversation_id', '=', conversationId)
    .executeTakeFirst();

export const insertRequest = (ctx: Ctx, row: Insertable<ChannelPrivacyRequestsTable>) =>
  exec(ctx)
    .insertInto('channel_privacy_requests')
    .values(row)
    .onConflict((oc) => oc.columns(['channel_id', 'external_conversation_id']).doNothing())
    .execute();

/** Moves a request only from the status it was read in (two approvers, or an approval racing expiry: one wins). */
export async function updateRequestFrom(ctx: Ctx, id: string, from: string, set: Updateable<ChannelPrivacyRequestsTable>): Promise<boolean> {
  const r = await exec(ctx)
    .updateTable('channel_privacy_requests')
    .set(set)
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .where('status', '=', from)
    .executeTakeFirst();
  return Number(r.numUpdatedRows) === 1;
}

/** Claims the once-per-window unauthorized reply: true for exactly one caller per window. */
export async function claimReply(ctx: Ctx, id: string, now: string, windowStart: string): Promise<boolean> {
  const r = await exec(ctx)
    .updateTable('channel_privacy_requests')
    .set({ replied_at: now })
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .where((eb) => eb.or([eb('replied_at', 'is', null), eb('replied_at', '<', windowStart)]))
    .executeTakeFirst();
  return Number(r.numUpdatedRows) === 1;
}

export const listGrants = (ctx: Ctx, channelId: string, status?: string) => {
  let q = exec(ctx).selectFrom('channel_privacy_grants').selectAll().where('org_id', '=', orgId(ctx)).where('channel_id', '=', channelId);
  if (status) q = q.where('status', '=', status);
  return q.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(500).execute();
};

export const findGrant = (ctx: Ctx, channelId: string, id: string) =>
  exec(ctx)
    .selectFrom('channel_privacy_grants')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('channel_id', '=', channelId)
    .where('id', '=', id)
    .executeTakeFirst();

/** The live grant of a conversation of this type (a private grant never opens a group, nor the other way). */
export const activeGrant = (ctx: Ctx, channelId: string, conversationId: string, type: string) =>
  exec(ctx)
    .selectFrom('channel_privacy_grants')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('channel_id', '=', channelId)
    .where('active_key', '=', conversationId)
    .where('conversation_type', '=', type)
    .executeTakeFirst();

export const liveGrant = (ctx: Ctx, channelId: string, conversationId: string) =>
  exec(ctx)
    .selectFrom('channel_privacy_grants')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('channel_id', '=', channelId)
    .where('active_key', '=', conversationId)
    .executeTakeFirst();

export const insertGrant = (ctx: Ctx, row: Insertable<ChannelPrivacyGrantsTable>) =>
  exec(ctx).insertInto('channel_privacy_grants').values(row).execute();

export async function revokeGrantRow(ctx: Ctx, id: string, set: Updateable<ChannelPrivacyGrantsTable>): Promise<boolean> {
  const r = await exec(ctx)
    .updateTable('channel_privacy_grants')
    .set(set)
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .where('status', '=', 'granted')
    .executeTakeFirst();
  return Number(r.numUpdatedRows) === 1;
}

/** Pending requests past their expiry become expired (any organization; the channels sweep). */
export async function expireRequests(ctx: Pick<Ctx, 'deps' | 'trx'>, now: string): Promise<number> {
  const r = await (ctx.trx ?? ctx.deps.db.kysely)
    .updateTable('channel_privacy_requests')
    .set({ status: 'expired', updated_at: now })
    .where('status', '=', 'pending')
    .where('expires_at', '<=', now)
    .executeTakeFirst();
  return Number(r.numUpdatedRows);
}
