/**
 * The channels domain's SQL for product apps, their end users, channel bindings, link sessions and channel identity
 * links; every query is scoped by the caller's organization here.
 */
import type { Insertable, Selectable } from 'kysely';
import type { ChannelBindingsTable, ChannelLinkSessionsTable, ChannelLinksTable, ProductAppsTable, ProductEndUsersTable } from '../../database.js';
import { exec, orgId, type Ctx } from '../../platform/context.js';

export type AppRow = Selectable<ProductAppsTable>;
export type EndUserRow = Selectable<ProductEndUsersTable>;
export type BindingRow = Selectable<ChannelBindingsTable>;
export type SessionRow = Selectable<ChannelLinkSessionsTable>;
export type LinkRow = Selectable<ChannelLinksTable>;

// ---- apps ----

export const appBySlug = (ctx: Ctx, slug: string) =>
  exec(ctx).selectFrom('product_apps').selectAll().where('org_id', '=', orgId(ctx)).where('slug', '=', slug).executeTakeFirst();

export const appById = (ctx: Ctx, id: string) =>
  exec(ctx).selectFrom('product_apps').selectAll().where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();

export const listAppRows = (ctx: Ctx) =>
  exec(ctx).selectFrom('product_apps').selectAll().where('org_id', '=', orgId(ctx)).orderBy('created_at').orderBy('id').execute();

export const insertApp = (ctx: Ctx, row: Insertable<ProductAppsTable>) => exec(ctx).insertInto('product_apps').values(row).execute();

/** Deletes an app and everything under it (children first: SQLite may run without foreign-key cascades). */
export async function deleteAppRows(ctx: Ctx, appId: string): Promise<void> {
  const org = orgId(ctx);
  for (const table of ['channel_links', 'channel_link_sessions', 'channel_bindings', 'product_end_users'] as const)
    await exec(ctx).deleteFrom(table).where('org_id', '=', org).where('app_id', '=', appId).execute();
  await exec(ctx).deleteFrom('product_apps').where('org_id', '=', org).where('id', '=', appId).execute();
}

// ---- end users ----

export const endUserByExternalId = (ctx: Ctx, appId: string, productExternalUserId: string) =>
  exec(ctx)
    .selectFrom('product_end_users')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('app_id', '=', appId)
    .where('product_external_user_id', '=', productExternalUserId)
    .executeTakeFirst();

export const endUserById = (ctx: Ctx, id: string) =>
  exec(ctx).selectFrom('product_end_users').selectAll().where('org_id', '=', orgId(ctx)).where('id', '=', id).executeTakeFirst();

export const insertEndUser = (ctx: Ctx, row: Insertable<ProductEndUsersTable>) => exec(ctx).insertInto('product_end_users').values(row).execute();

// ---- bindings ----

export const bindingByChannel = (ctx: Ctx, channelId: string) =>
  exec(ctx)
    .selectFrom('channel_bindings')
    .innerJoin('product_apps', 'product_apps.id', 'channel_bindings.app_id')
    .selectAll('channel_bindings')
    .select(['product_apps.slug as app_slug', 'product_apps.name as app_name'])
    .where('channel_bindings.org_id', '=', orgId(ctx))
    .where('channel_bindings.channel_id', '=', channelId)
    .executeTakeFirst();

export const bindingById = (ctx: Ctx, appId: string, id: string) =>
  exec(ctx)
    .selectFrom('channel_bindings')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('app_id', '=', appId)
    .where('id', '=', id)
    .executeTakeFirst();

export const listBindingRows = (ctx: Ctx, appId: string) =>
  exec(ctx)
    .selectFrom('channel_bindings')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('app_id', '=', appId)
    .orderBy('created_at')
    .orderBy('id')
    .execute();

export const insertBinding = (ctx: Ctx, row: Insertable<ChannelBindingsTable>) => exec(ctx).insertInto('channel_bindings').values(row).execute();

export const deleteBindingRow = (ctx: Ctx, appId: string, id: string) =>
  exec(ctx).deleteFrom('channel_bindings').where('org_id', '=', orgId(ctx)).where('app_id', '=', appId).where('id', '=', id).executeTakeFirst();

// ---- link sessions ----

export const insertSession = (ctx: Ctx, row: Insertable<ChannelLinkSessionsTable>) =>
  exec(ctx).insertInto('channel_link_sessions').values(row).execute();

export const sessionById = (ctx: Ctx, appId: string, id: string) =>
  exec(ctx)
    .selectFrom('channel_link_sessions')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('app_id', '=', appId)
    .where('id', '=', id)
    .executeTakeFirst();

export const sessionByTokenHash = (ctx: Ctx, channelId: string, tokenHash: string) =>
  exec(ctx)
    .selectFrom('channel_link_sessions')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('channel_id', '=', channelId)
    .where('token_hash', '=', tokenHash)
    .executeTakeFirst();

/** Records the chat sender who presented a session's token, unless the session already names one. */
export const recordSessionSender = (ctx: Ctx, id: string, sender: { externalUserId: string; conversationId: string }) =>
  exec(ctx)
    .updateTable('channel_link_sessions')
    .set({ external_user_id: sender.externalUserId, external_conversation_id: sender.conversationId })
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .where('status', '=', 'created')
    .where((eb) => eb.or([eb('external_user_id', 'is', null), eb('external_user_id', '=', sender.externalUserId)]))
    .executeTakeFirst();

/** Uses a session up: true for the one caller whose update found it still `created`. */
export async function claimSession(ctx: Ctx, id: string, linkId: string, now: string): Promise<boolean> {
  const res = await exec(ctx)
    .updateTable('channel_link_sessions')
    .set({ status: 'completed', link_id: linkId, completed_at: now })
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .where('status', '=', 'created')
    .executeTakeFirst();
  return Number(res.numUpdatedRows) === 1;
}

export const expireSession = (ctx: Ctx, id: string) =>
  exec(ctx)
    .updateTable('channel_link_sessions')
    .set({ status: 'expired' })
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .where('status', '=', 'created')
    .execute();

// ---- links ----

export const insertLink = (ctx: Ctx, row: Insertable<ChannelLinksTable>) => exec(ctx).insertInto('channel_links').values(row).execute();

export const linkById = (ctx: Ctx, appId: string, id: string) =>
  exec(ctx)
    .selectFrom('channel_links')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('app_id', '=', appId)
    .where('id', '=', id)
    .executeTakeFirst();

export const activeLinkRow = (ctx: Ctx, channelId: string, providerUserId: string) =>
  exec(ctx)
    .selectFrom('channel_links')
    .innerJoin('product_apps', 'product_apps.id', 'channel_links.app_id')
    .selectAll('channel_links')
    .select('product_apps.slug as app_slug')
    .where('channel_links.org_id', '=', orgId(ctx))
    .where('channel_links.channel_id', '=', channelId)
    .where('channel_links.active_key', '=', providerUserId)
    .where('channel_links.status', '=', 'active')
    .executeTakeFirst();

/** Revokes the sender's active link on the channel, if any; answers the revoked link's id. */
export async function revokeActiveLinkOf(ctx: Ctx, channelId: string, providerUserId: string, now: string): Promise<LinkRow | undefined> {
  const current = await exec(ctx)
    .selectFrom('channel_links')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('channel_id', '=', channelId)
    .where('active_key', '=', providerUserId)
    .executeTakeFirst();
  if (!current) return undefined;
  await revokeLinkRow(ctx, current.id, now);
  return current;
}

export const revokeLinkRow = (ctx: Ctx, id: string, now: string) =>
  exec(ctx)
    .updateTable('channel_links')
    .set({ status: 'revoked', active_key: null, revoked_at: now })
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .where('status', '=', 'active')
    .executeTakeFirst();

export function listLinkRows(ctx: Ctx, appId: string, filter: { channelId?: string; productExternalUserId?: string; status?: string }) {
  let q = exec(ctx).selectFrom('channel_links').selectAll().where('org_id', '=', orgId(ctx)).where('app_id', '=', appId);
  if (filter.channelId) q = q.where('channel_id', '=', filter.channelId);
  if (filter.productExternalUserId) q = q.where('product_external_user_id', '=', filter.productExternalUserId);
  if (filter.status) q = q.where('status', '=', filter.status);
  return q.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(500).execute();
}
