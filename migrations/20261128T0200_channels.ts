import type { Kysely } from 'kysely';

// Messaging channels and product channel bindings (issue 17, ADR 0030).
// - channels: an agent's connection to a chat provider account (a bot, a business phone number). Secrets are
//   named, never stored here; `webhook_secret_ciphertext` is the secret Hangar generated for inbound requests
//   (the chat-bot provider's secret token, the business provider's verify token). One agent per provider account
//   in an organization: unique (org_id, provider, account_id). Privacy settings live on the row.
// - channel_conversations: an external conversation (a private chat, a group; a product sender inside a
//   sender-scoped group) and the thread it maps to.
// - channel_messages: every inbound message, stored before the webhook is acknowledged; unique by the provider's
//   id so a provider's retry is a no-op. status received -> processing -> replied | ignored | failed; a message
//   waiting for its conversation's active run goes back to received with a later next_attempt_at.
// - channel_privacy_requests: an unknown sender asking for access (one row per conversation, reused).
// - channel_privacy_grants: access for one conversation; `active_key` is the conversation id while granted and
//   null once revoked, so at most one live grant per conversation.
// - product_apps, product_end_users: a builder's product app (the `{appSlug}` of /v1/apps) and the product's users
//   who linked a chat identity; an end user's id is the user id their runs and OAuth connections act as.
// - channel_bindings: a channel bound to a product app (at most one app per channel).
// - channel_link_sessions: a pending link with the sha256 of its `pcl_` token; created -> completed | expired.
// - channel_links: a chat sender linked to a product user; `active_key` as for grants.
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('channels')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('agent_id', 'text', (c) => c.notNull())
    .addColumn('agent_slug', 'text', (c) => c.notNull())
    .addColumn('provider', 'text', (c) => c.notNull())
    .addColumn('mode', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('account_id', 'text', (c) => c.notNull())
    .addColumn('account_name', 'text')
    .addColumn('business_account_id', 'text')
    .addColumn('bot_token_secret', 'text')
    .addColumn('access_token_secret', 'text')
    .addColumn('app_secret_secret', 'text')
    .addColumn('webhook_secret_ciphertext', 'text', (c) => c.notNull())
    .addColumn('webhook_registered_at', 'text')
    .addColumn('privacy_mode', 'text', (c) => c.notNull())
    .addColumn('allow_private_chats', 'integer', (c) => c.notNull())
    .addColumn('allow_groups', 'integer', (c) => c.notNull())
    .addColumn('unauthorized_reply', 'text', (c) => c.notNull())
    .addColumn('unauthorized_message', 'text')
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('channels_account', ['org_id', 'provider', 'account_id'])
    .execute();
  await db.schema.createIndex('channels_org_agent').on('channels').columns(['org_id', 'agent_id']).execute();

  await db.schema
    .createTable('channel_conversations')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('channel_id', 'text', (c) => c.notNull().references('channels.id').onDelete('cascade'))
    .addColumn('external_conversation_id', 'text', (c) => c.notNull())
    // '' for the conversation itself; the sender's id inside a sender-scoped group of a product binding.
    .addColumn('sender_scope', 'text', (c) => c.notNull())
    .addColumn('conversation_type', 'text', (c) => c.notNull())
    .addColumn('display_name', 'text')
    .addColumn('thread_id', 'text')
    .addColumn('owner_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('channel_conversations_key', ['channel_id', 'external_conversation_id', 'sender_scope', 'owner_user_id'])
    .execute();

  await db.schema
    .createTable('channel_messages')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('channel_id', 'text', (c) => c.notNull().references('channels.id').onDelete('cascade'))
    .addColumn('provider_message_id', 'text', (c) => c.notNull())
    .addColumn('external_conversation_id', 'text', (c) => c.notNull())
    .addColumn('conversation_type', 'text', (c) => c.notNull())
    .addColumn('conversation_name', 'text')
    .addColumn('sender_id', 'text', (c) => c.notNull())
    .addColumn('sender_name', 'text')
    .addColumn('sender_username', 'text')
    .addColumn('text', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('outcome', 'text')
    .addColumn('attempts', 'integer', (c) => c.notNull())
    .addColumn('next_attempt_at', 'text', (c) => c.notNull())
    .addColumn('lease_until', 'text')
    .addColumn('thread_id', 'text')
    .addColumn('run_id', 'text')
    .addColumn('reply_text', 'text')
    .addColumn('reply_parts_sent', 'integer', (c) => c.notNull())
    .addColumn('error', 'text')
    .addColumn('received_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('channel_messages_provider_id', ['channel_id', 'provider_message_id'])
    .execute();
  await db.schema.createIndex('channel_messages_due').on('channel_messages').columns(['status', 'next_attempt_at']).execute();
  await db.schema
    .createIndex('channel_messages_conversation')
    .on('channel_messages')
    .columns(['channel_id', 'external_conversation_id', 'received_at'])
    .execute();

  await db.schema
    .createTable('channel_privacy_requests')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('channel_id', 'text', (c) => c.notNull().references('channels.id').onDelete('cascade'))
    .addColumn('external_conversation_id', 'text', (c) => c.notNull())
    .addColumn('conversation_type', 'text', (c) => c.notNull())
    .addColumn('conversation_display_name', 'text')
    .addColumn('external_user_id', 'text', (c) => c.notNull())
    .addColumn('display_name', 'text')
    .addColumn('username', 'text')
    .addColumn('first_message', 'text')
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('replied_at', 'text')
    .addColumn('expires_at', 'text', (c) => c.notNull())
    .addColumn('decided_by_user_id', 'text')
    .addColumn('decided_at', 'text')
    .addColumn('grant_id', 'text')
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('channel_privacy_requests_conversation', ['channel_id', 'external_conversation_id'])
    .execute();

  await db.schema
    .createTable('channel_privacy_grants')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('channel_id', 'text', (c) => c.notNull().references('channels.id').onDelete('cascade'))
    .addColumn('scope', 'text', (c) => c.notNull())
    .addColumn('external_conversation_id', 'text', (c) => c.notNull())
    .addColumn('conversation_type', 'text', (c) => c.notNull())
    .addColumn('conversation_display_name', 'text')
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('active_key', 'text')
    .addColumn('request_id', 'text')
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('revoked_at', 'text')
    .addColumn('revoked_by_user_id', 'text')
    .addUniqueConstraint('channel_privacy_grants_active', ['channel_id', 'active_key'])
    .execute();

  await db.schema
    .createTable('product_apps')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('slug', 'text', (c) => c.notNull())
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('product_apps_slug', ['org_id', 'slug'])
    .execute();

  await db.schema
    .createTable('product_end_users')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('app_id', 'text', (c) => c.notNull().references('product_apps.id').onDelete('cascade'))
    .addColumn('product_external_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addUniqueConstraint('product_end_users_key', ['app_id', 'product_external_user_id'])
    .execute();

  await db.schema
    .createTable('channel_bindings')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('app_id', 'text', (c) => c.notNull().references('product_apps.id').onDelete('cascade'))
    .addColumn('channel_id', 'text', (c) => c.notNull().unique().references('channels.id').onDelete('cascade'))
    .addColumn('identity_policy', 'text', (c) => c.notNull())
    .addColumn('group_policy', 'text', (c) => c.notNull())
    .addColumn('unknown_sender_reply', 'text', (c) => c.notNull())
    .addColumn('metadata', 'text', (c) => c.notNull())
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('channel_link_sessions')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('app_id', 'text', (c) => c.notNull().references('product_apps.id').onDelete('cascade'))
    .addColumn('channel_id', 'text', (c) => c.notNull().references('channels.id').onDelete('cascade'))
    .addColumn('token_hash', 'text', (c) => c.notNull().unique())
    .addColumn('external_user_id', 'text')
    .addColumn('external_conversation_id', 'text')
    // The product user who started it, when the product named one: only they can complete it.
    .addColumn('product_external_user_id', 'text')
    .addColumn('return_url', 'text')
    // api: the product's server created it; chat: Hangar did, for an unlinked sender's message.
    .addColumn('origin', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('link_id', 'text')
    .addColumn('expires_at', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('completed_at', 'text')
    .execute();

  await db.schema
    .createTable('channel_links')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('org_id', 'text', (c) => c.notNull().references('organizations.id').onDelete('cascade'))
    .addColumn('app_id', 'text', (c) => c.notNull().references('product_apps.id').onDelete('cascade'))
    .addColumn('channel_id', 'text', (c) => c.notNull().references('channels.id').onDelete('cascade'))
    .addColumn('end_user_id', 'text', (c) => c.notNull())
    .addColumn('product_external_user_id', 'text', (c) => c.notNull())
    .addColumn('provider_external_user_id', 'text', (c) => c.notNull())
    .addColumn('external_conversation_id', 'text')
    .addColumn('display_name', 'text')
    .addColumn('username', 'text')
    .addColumn('source', 'text', (c) => c.notNull())
    .addColumn('session_id', 'text')
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('active_key', 'text')
    .addColumn('created_by_user_id', 'text', (c) => c.notNull())
    .addColumn('created_at', 'text', (c) => c.notNull())
    .addColumn('revoked_at', 'text')
    .addUniqueConstraint('channel_links_active', ['channel_id', 'active_key'])
    .execute();
  await db.schema
    .createIndex('channel_links_product_user')
    .on('channel_links')
    .columns(['app_id', 'product_external_user_id'])
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of [
    'channel_links',
    'channel_link_sessions',
    'channel_bindings',
    'product_end_users',
    'product_apps',
    'channel_privacy_grants',
    'channel_privacy_requests',
    'channel_messages',
    'channel_conversations',
    'channels',
  ])
    await db.schema.dropTable(t).execute();
}
