import { randomInt } from 'node:crypto';
import { prefixedId } from '../src/platform/ids.js';
import type { Actor, Harness } from './harness.js';

/**
 * A channel row of `actor`'s organization, inserted directly (as the channels domain stores one after connecting a
 * provider account), for tests of what is built on channels without a provider fake.
 */
export async function seedChannel(
  h: Harness,
  actor: Actor,
  opts: { provider?: 'chatbot_provider' | 'business_messaging_provider'; accountId?: string; accountName?: string; agentSlug?: string } = {},
): Promise<{ id: string }> {
  const provider = opts.provider ?? 'chatbot_provider';
  const id = prefixedId('chn');
  const now = new Date().toISOString();
  await h.deps.db.kysely
    .insertInto('channels')
    .values({
      id,
      org_id: actor.orgId,
      agent_id: prefixedId('agt'),
      agent_slug: opts.agentSlug ?? 'support-bot',
      provider,
      mode: 'byok',
      status: 'active',
      account_id: opts.accountId ?? String(randomInt(1_000_000, 9_999_999_999)),
      account_name: opts.accountName ?? (provider === 'chatbot_provider' ? 'acme_support_bot' : '+1 555 0100'),
      business_account_id: provider === 'business_messaging_provider' ? 'waba-1' : null,
      bot_token_secret: provider === 'chatbot_provider' ? 'BOT_TOKEN' : null,
      access_token_secret: provider === 'business_messaging_provider' ? 'ACCESS_TOKEN' : null,
      app_secret_secret: provider === 'business_messaging_provider' ? 'APP_SECRET' : null,
      webhook_secret_ciphertext: 'sealed-webhook-secret',
      webhook_registered_at: null,
      privacy_mode: 'approved_only',
      allow_private_chats: 1,
      allow_groups: 0,
      unauthorized_reply: 'message',
      unauthorized_message: null,
      created_by_user_id: actor.userId,
      created_at: now,
      updated_at: now,
    })
    .execute();
  return { id };
}
