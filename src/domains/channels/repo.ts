/** The channels domain's SQL for channels and their messages; every query of an organization's rows is scoped here. */
import type { Insertable, Selectable, Updateable } from 'kysely';
import type { ChannelConversationsTable, ChannelMessagesTable, ChannelsTable } from '../../database.js';
import { exec, orgId, type Ctx } from '../../platform/context.js';
import type { Executor } from '../../platform/db/index.js';

export type ChannelRow = Selectable<ChannelsTable>;
export type MessageRow = Selectable<ChannelMessagesTable>;
export type ConversationRow = Selectable<ChannelConversationsTable>;

/** A channel of the caller's organization, or undefined. */
export const findChannel = (ctx: Ctx, id: string) =>
  exec(ctx).selectFrom('channels').selectAll().where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();

/** Any organization's channel (inbound webhooks name it in the path; the request is verified against it). */
export const channelById = (db: Executor, id: string) => db.selectFrom('channels').selectAll().where('id', '=', id).executeTakeFirst();

export const listChannelRows = (ctx: Ctx, filter: { agentId?: string; provider?: string }) => {
  let q = exec(ctx).selectFrom('channels').selectAll().where('org_id', '=', orgId(ctx));
  if (filter.agentId) q = q.where('agent_id', '=', filter.agentId);
  if (filter.provider) q = q.where('provider', '=', filter.provider);
  return q.orderBy('created_at').orderBy('id').execute();
};

export const channelByAccount = (ctx: Ctx, provider: string, accountId: string) =>
  exec(ctx)
    .selectFrom('channels')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('provider', '=', provider)
    .where('account_id', '=', accountId)
    .executeTakeFirst();

export const insertChannel = (ctx: Ctx, row: Insertable<ChannelsTable>) => exec(ctx).insertInto('channels').values(row).execute();

export const updateChannel = (ctx: Ctx, id: string, set: Updateable<ChannelsTable>) =>
  exec(ctx).updateTable('channels').set(set).where('org_id', '=', orgId(ctx)).where('id', '=', id).execute();

export const deleteChannelRow = (ctx: Ctx, id: string) =>
  exec(ctx).deleteFrom('channels').where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();
