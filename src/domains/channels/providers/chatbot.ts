/**
 * The chat-bot provider (`chatbot_provider`), in the Telegram Bot API wire format: `POST <url>/bot<token>/<method>`
 * with a JSON body, answers `{ ok: true, result }` or `{ ok: false, error_code, description, parameters? }`.
 * Webhook POSTs carry the secret given to `setWebhook` in `X-Telegram-Bot-Api-Secret-Token`.
 */
import { z } from 'zod';
import type { ChannelsConfig } from '../../../config.js';
import { callProvider, headerOf, MAX_INBOUND_TEXT, type ProviderResponse, parseInbound, sameSecret, scrub, truncate } from './http.js';
import { type AdapterFactory, type ChannelAdapter, type InboundMessage, ProviderError, type ProviderCredentials } from './types.js';

const NAME = 'the chat-bot provider';
const MAX_MESSAGE_CHARS = 4096;
/** The token is part of the URL path: only the characters a bot token has (`<digits>:<letters, digits, _ ->`). */
const TOKEN_FORMAT = /^[A-Za-z0-9:_-]{1,256}$/;
const USERNAME_FORMAT = /^[A-Za-z0-9_]{1,64}$/;

const Failure = z.looseObject({
  ok: z.literal(false),
  error_code: z.number().int().optional(),
  description: z.string().optional(),
  parameters: z.looseObject({ retry_after: z.number().nonnegative().optional() }).optional(),
});

const Me = z.looseObject({
  id: z.number().int(),
  is_bot: z.boolean().optional(),
  first_name: z.string().max(1000),
  username: z.string().max(1000).optional(),
});
const SentMessage = z.looseObject({ message_id: z.number().int() });

const reasons: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  409: 'Conflict',
  429: 'Too Many Requests',
};

function tokenOf(creds: ProviderCredentials): string {
  if (!creds.token || !TOKEN_FORMAT.test(creds.token))
    throw new ProviderError("the bot token is not in the chat-bot provider's format (<digits>:<letters, digits, _ and ->)", {
      code: 'invalid_token_format',
      permanent: true,
    });
  return creds.token;
}

/** Turns a non-ok answer into a ProviderError: rate limit (retry later), 5xx (retryable), other 4xx (permanent). */
function failure(method: string, r: ProviderResponse, token: string): ProviderError {
  const parsed = Failure.safeParse(r.json);
  const code = parsed.success && parsed.data.error_code ? parsed.data.error_code : r.status;
  const description = parsed.success && parsed.data.description ? scrub(parsed.data.description, [token]) : null;
  const status = r.status >= 400 ? r.status : code;
  if (code === 429 || status === 429) {
    const after = parsed.success ? parsed.data.parameters?.retry_after : undefined;
    return new ProviderError(`${NAME} is rate limiting ${method}${after !== undefined ? ` (retry after ${after} s)` : ''}`, {
      status: 429,
      code: 429,
      retryAfterMs: after !== undefined ? Math.ceil(after * 1000) : undefined,
    });
  }
  if (!parsed.success && r.status >= 400 && r.status < 500)
    return new ProviderError(`${NAME} answered ${method} with HTTP ${r.status} and no Bot API answer (is HANGAR_CHANNELS_CHATBOT_API_URL right?)`, {
      status,
      code: r.status,
      permanent: true,
    });
  if (code === 401 || code === 404)
    return new ProviderError(`the bot token was refused by ${NAME} (${code} ${reasons[code]})`, { status, code, permanent: true });
  if (status >= 500 || code >= 500 || !parsed.success)
    return new ProviderError(`${NAME} failed ${method} (${status}${description ? `: ${description}` : ''})`, { status, code });
  // 400 (bad chat id, empty text), 403 (bot was blocked by the user, kicked from the group), 409 and the rest.
  const detail = description ?? reasons[code] ?? 'refused';
  return new ProviderError(`${NAME} refused ${method} (${code}: ${detail})`, { status, code, permanent: true });
}

async function call<T>(config: ChannelsConfig, creds: ProviderCredentials, method: string, body: unknown, result: z.ZodType<T>): Promise<T> {
  const token = tokenOf(creds);
  const r = await callProvider(
    { provider: NAME, timeoutMs: config.providerTimeoutMs, secrets: [token] },
    `${config.chatbotApiUrl}/bot${token}/${method}`,
    {
      method: 'POST',
      body,
    },
  );
  const ok = z.looseObject({ ok: z.literal(true), result }).safeParse(r.json);
  if (r.status >= 200 && r.status < 300 && ok.success) return ok.data.result as T;
  if (r.status >= 200 && r.status < 300 && !Failure.safeParse(r.json).success)
    throw new ProviderError(`${NAME} answered ${method} with something that is not a Bot API answer`, { status: r.status, code: 'bad_response' });
  throw failure(method, r, token);
}

// ---- inbound -------------------------------------------------------------------------------------------------

const name = z.string().max(10_000);
const User = z.looseObject({
  id: z.number().int(),
  is_bot: z.boolean(),
  first_name: name,
  last_name: name.optional(),
  username: name.optional(),
});
const Chat = z.looseObject({
  id: z.number().int(),
  type: z.string().max(40),
  title: name.optional(),
  first_name: name.optional(),
  username: name.optional(),
});
const Message = z.looseObject({
  message_id: z.number().int(),
  date: z.number().int().nonnegative(),
  from: User.optional(),
  chat: Chat,
  text: z.string().max(1_000_000).optional(),
  caption: z.string().max(1_000_000).optional(),
});
const Update = z.looseObject({ update_id: z.number().int(), message: Message.optional() });

/** Messages that are something that happened in the chat, not something a person wrote: never an agent's input. */
const SERVICE_FIELDS = [
  'new_chat_members',
  'left_chat_member',
  'new_chat_title',
  'new_chat_photo',
  'delete_chat_photo',
  'group_chat_created',
  'supergroup_chat_created',
  'channel_chat_created',
  'migrate_to_chat_id',
  'migrate_from_chat_id',
  'pinned_message',
  'message_auto_delete_timer_changed',
  'forum_topic_created',
  'forum_topic_edited',
  'forum_topic_closed',
  'forum_topic_reopened',
  'video_chat_started',
  'video_chat_ended',
  'video_chat_scheduled',
  'video_chat_participants_invited',
  'chat_shared',
  'users_shared',
  'write_access_allowed',
  'successful_payment',
] as const;

/** Content kinds described in place of text, in the order they are checked. */
const CONTENT_KINDS = [
  'photo',
  'document',
  'sticker',
  'video',
  'video_note',
  'voice',
  'audio',
  'animation',
  'contact',
  'location',
  'venue',
  'poll',
  'dice',
  'game',
  'story',
  'invoice',
] as const;

function describe(message: Record<string, unknown>): string {
  // An animation also carries `document`; name it as what the sender sees.
  if (message.animation !== undefined) return '[animation]';
  for (const kind of CONTENT_KINDS) if (message[kind] !== undefined) return `[${kind.replace('_', ' ')}]`;
  return '[unsupported message]';
}

const fullName = (first: string, last?: string) =>
  truncate(
    [first, last]
      .filter((s) => s?.trim())
      .join(' ')
      .trim(),
    256,
  ) || null;

function parseUpdate(rawBody: Buffer) {
  const update = parseInbound(rawBody, Update, 'chat-bot update');
  const kind = Object.keys(update).find((k) => k !== 'update_id');
  const message = update.message;
  if (!message) return { kind: 'ignored' as const, reason: kind ? `a ${truncate(kind, 60)} update is not handled` : 'an empty update' };
  if (!message.from) return { kind: 'ignored' as const, reason: 'a message without a sender (a channel post or an anonymous admin)' };
  if (message.from.is_bot) return { kind: 'ignored' as const, reason: 'a message sent by a bot' };
  const chatType = message.chat.type;
  if (chatType !== 'private' && chatType !== 'group' && chatType !== 'supergroup')
    return { kind: 'ignored' as const, reason: `a message in a ${truncate(chatType, 40)} chat` };
  const service = SERVICE_FIELDS.find((f) => (message as Record<string, unknown>)[f] !== undefined);
  if (service && message.text === undefined) return { kind: 'ignored' as const, reason: `a service message (${service})` };
  const text = message.text ?? message.caption ?? describe(message);
  const inbound: InboundMessage = {
    providerMessageId: `update:${update.update_id}`,
    conversationId: String(message.chat.id),
    conversationType: chatType === 'private' ? 'private' : 'group',
    conversationName: chatType === 'private' ? null : message.chat.title ? truncate(message.chat.title, 256) : null,
    senderId: String(message.from.id),
    senderName: fullName(message.from.first_name, message.from.last_name),
    senderUsername: message.from.username ? truncate(message.from.username, 64) : null,
    text: truncate(text, MAX_INBOUND_TEXT),
    sentAt: new Date(message.date * 1000).toISOString(),
  };
  return { kind: 'messages' as const, messages: [inbound] };
}

export const chatbotAdapter: AdapterFactory = (config: ChannelsConfig): ChannelAdapter => ({
  provider: 'chatbot_provider',
  maxMessageChars: MAX_MESSAGE_CHARS,

  async identify(creds) {
    const me = await call(config, creds, 'getMe', {}, Me);
    return { accountId: String(me.id), accountName: me.username ?? null, displayName: me.first_name || null };
  },

  async registerWebhook(creds, webhookUrl, secret) {
    await call(config, creds, 'setWebhook', { url: webhookUrl, secret_token: secret, allowed_updates: ['message'] }, z.unknown());
    return { webhookUrl, registered: true };
  },

  async send(creds, conversationId, text) {
    if (text.length > MAX_MESSAGE_CHARS)
      throw new ProviderError(`a chat-bot message holds at most ${MAX_MESSAGE_CHARS} characters (split it first)`, {
        code: 'too_long',
        permanent: true,
      });
    const numeric = /^-?\d{1,16}$/.test(conversationId) && Number.isSafeInteger(Number(conversationId));
    const sent = await call(config, creds, 'sendMessage', { chat_id: numeric ? Number(conversationId) : conversationId, text }, SentMessage);
    return { providerMessageId: String(sent.message_id) };
  },

  verify(headers, _rawBody, secret) {
    if (!secret) return false;
    const given = headerOf(headers, 'x-telegram-bot-api-secret-token');
    if (given === undefined || given === '') return false;
    return sameSecret(given, secret);
  },

  parse: parseUpdate,

  deepLink(identity, payload) {
    const username = identity.accountName?.replace(/^@/, '');
    if (!username || !USERNAME_FORMAT.test(username)) return null;
    return `${config.chatbotLinkUrl}/${username}?start=${encodeURIComponent(payload)}`;
  },
});
