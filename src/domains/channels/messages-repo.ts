/** SQL of inbound channel messages and conversations (the processing queue lives in channel_messages). */
import type { Insertable, Updateable } from 'kysely';
import type { ChannelMessagesTable } from '../../database.js';
import { exec, orgId, type Ctx } from '../../platform/context.js';
import type { Executor } from '../../platform/db/index.js';
import type { ConversationRow, MessageRow } from './repo.js';

/** Stores a message unless the provider sent it before (its retry): true when it is new. */
export async function insertMessage(ctx: Ctx, row: Insertable<ChannelMessagesTable>): Promise<boolean> {
  const r = await exec(ctx)
    .insertInto('channel_messages')
    .values(row)
    .onConflict((oc) => oc.columns(['channel_id', 'provider_message_id']).doNothing())
    .executeTakeFirst();
  return Number(r.numInsertedOrUpdatedRows ?? 0) === 1;
}

export const messageById = (db: Executor, id: string) => db.selectFrom('channel_messages').selectAll().where('id', '=', id).executeTakeFirst();

/**
 * Takes a due message for processing: received and due (or processing under a lapsed lease, its process gone), and
 * no earlier message of its conversation unfinished, so a conversation's messages are answered in order.
 */
export async function claimMessage(db: Executor, id: string, now: string, leaseUntil: string): Promise<MessageRow | undefined> {
  const r = await db
    .updateTable('channel_messages')
    .set((eb) => ({ status: 'processing', lease_until: leaseUntil, attempts: eb('attempts', '+', 1), updated_at: now }))
    .where('id', '=', id)
    .where((eb) =>
      eb.or([
        eb.and([eb('status', '=', 'received'), eb('next_attempt_at', '<=', now)]),
        eb.and([eb('status', '=', 'processing'), eb('lease_until', '<', now)]),
      ]),
    )
    .where(({ not, exists, selectFrom }) =>
      not(
        exists(
          selectFrom('channel_messages as earlier')
            .select('earlier.id')
            .whereRef('earlier.channel_id', '=', 'channel_messages.channel_id')
            .whereRef('earlier.external_conversation_id', '=', 'channel_messages.external_conversation_id')
            .where('earlier.status', 'in', ['received', 'processing'])
            .whereRef('earlier.id', '<', 'channel_messages.id'),
        ),
      ),
    )
    .executeTakeFirst();
  if (Number(r.numUpdatedRows) !== 1) return undefined;
  return messageById(db, id);
}

/** Changes a message this process holds (its lease still ours: status processing). */
export async function updateHeld(db: Executor, id: string, set: Updateable<ChannelMessagesTable>): Promise<boolean> {
  const r = await db.updateTable('channel_messages').set(set).where('id', '=', id).where('status', '=', 'processing').executeTakeFirst();
  return Number(r.numUpdatedRows) === 1;
}

/** Messages due now, oldest first (any organization: the processing pump). */
export const dueMessages = (db: Executor, now: string, limit: number) =>
  db
    .selectFrom('channel_messages')
    .select(['id', 'channel_id', 'external_conversation_id'])
    .where((eb) =>
      eb.or([
        eb.and([eb('status', '=', 'received'), eb('next_attempt_at', '<=', now)]),
        eb.and([eb('status', '=', 'processing'), eb('lease_until', '<', now)]),
      ]),
    )
    .orderBy('id')
    .limit(limit)
    .execute();

/** The next waiting message of a conversation, if due. */
export const nextOfConversation = (db: Executor, channelId: string, conversationId: string, now: string) =>
  db
    .selectFrom('channel_messages')
    .select(['id', 'channel_id', 'external_conversation_id'])
    .where('channel_id', '=', channelId)
    .where('external_conversation_id', '=', conversationId)
    .where('status', '=', 'received')
    .where('next_attempt_at', '<=', now)
    .orderBy('id')
    .limit(1)
    .executeTakeFirst();

export const listMessages = (ctx: Ctx, channelId: string, q: { status?: string; limit: number }) => {
  let s = exec(ctx).selectFrom('channel_messages').selectAll().where('org_id', '=', orgId(ctx)).where('channel_id', '=', channelId);
  if (q.status) s = s.where('status', '=', q.status);
  return s.orderBy('id', 'desc').limit(q.limit).execute();
};

export const findConversation = (ctx: Ctx, key: { channelId: string; conversationId: string; senderScope: string; owner: string }) =>
  exec(ctx)
    .selectFrom('channel_conversations')
    .selectAll()
    .where('org_id', '=', orgId(ctx))
    .where('channel_id', '=', key.channelId)
    .where('external_conversation_id', '=', key.conversationId)
    .where('sender_scope', '=', key.senderScope)
    .where('owner_user_id', '=', key.owner)
    .executeTakeFirst();

export const insertConversation = (ctx: Ctx, row: ConversationRow) =>
  exec(ctx)
    .insertInto('channel_conversations')
    .values(row)
    .onConflict((oc) => oc.columns(['channel_id', 'external_conversation_id', 'sender_scope', 'owner_user_id']).doNothing())
    .execute();

export const setConversationThread = (ctx: Ctx, id: string, threadId: string, now: string) =>
  exec(ctx)
    .updateTable('channel_conversations')
    .set({ thread_id: threadId, updated_at: now })
    .where('org_id', '=', orgId(ctx))
    .where('id', '=', id)
    .execute();
