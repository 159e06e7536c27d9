/**
 * The channel-adapter interface (ADR 0030): everything Hangar needs from a chat provider, so a new provider is one
 * module implementing it and one line in `index.ts`. Adapters are pure clients of the provider's wire format: they
 * know nothing of the database, and every call is bounded by the configured timeout.
 */
import type { ChannelsConfig } from '../../../config.js';

export const PROVIDERS = ['chatbot_provider', 'business_messaging_provider'] as const;
export type ProviderSlug = (typeof PROVIDERS)[number];

/**
 * The spec's other product channel kinds, not built in this version: naming one answers 400 `provider_not_supported`
 * (README lists them).
 */
export const PLANNED_PROVIDERS = ['workplace_chat_app', 'community_chat_app', 'instant_messaging_app', 'sms'] as const;

/** The credentials an adapter acts with, resolved from stored secrets by the channels service at use. */
export interface ProviderCredentials {
  /** chatbot_provider: the bot token. business_messaging_provider: the access token. */
  token: string;
  /** business_messaging_provider: the app secret (signs its webhooks). */
  appSecret?: string;
  /** business_messaging_provider */
  phoneNumberId?: string;
  businessAccountId?: string;
}

/** Who the credentials say the account is (the bot; the business phone number). */
export interface ProviderIdentity {
  /** The bot's numeric id as a string; the phone number id. */
  accountId: string;
  /** The bot's username (no @); the display phone number. */
  accountName: string | null;
  /** The bot's first name; the number's verified business name. */
  displayName: string | null;
}

/** One message a sender wrote, normalised. */
export interface InboundMessage {
  /** Unique per account at the provider: `update:<update_id>` (chat-bot), the message's `wamid.…` id (business). */
  providerMessageId: string;
  /** Private chat: the sender's chat id (chat-bot) or phone (business); a group: the group's chat id. */
  conversationId: string;
  conversationType: 'private' | 'group';
  conversationName: string | null;
  senderId: string;
  senderName: string | null;
  senderUsername: string | null;
  /** The text (non-text messages are described, e.g. "[photo]"), at most 16 000 characters. */
  text: string;
  /** business_messaging_provider: the phone number id the event is for (routing). */
  phoneNumberId?: string;
  /** The provider's send time, ISO. */
  sentAt: string | null;
}

/** What an inbound request turned out to be, after verification. */
export type InboundResult =
  | { kind: 'messages'; messages: InboundMessage[] }
  /** Verified, nothing for an agent (a status update, an edited message, a bot's own post). */
  | { kind: 'ignored'; reason: string };

/** A provider refusing or failing a call. `retryAfterMs` set: a rate limit; `permanent`: retrying will not help. */
export class ProviderError extends Error {
  constructor(
    message: string,
    readonly opts: { status?: number; code?: string | number; retryAfterMs?: number; permanent?: boolean } = {},
  ) {
    super(message);
    this.name = 'ProviderError';
  }
}

/** What setting up the provider's webhook answered. */
export interface WebhookSetup {
  webhookUrl: string;
  /** business_messaging_provider: the token to paste into the provider's webhook settings. */
  verifyToken?: string;
  /** Whether Hangar registered it with the provider itself (chat-bot) or the user must paste it (business). */
  registered: boolean;
}

export interface ChannelAdapter {
  readonly provider: ProviderSlug;
  /** The most characters one outgoing message may hold (longer replies are split). */
  readonly maxMessageChars: number;
  /** The provider's identity call (`getMe`; the phone number lookup, checked against the business account). */
  identify(creds: ProviderCredentials): Promise<ProviderIdentity>;
  /** Sets the webhook where the provider allows it (chat-bot `setWebhook` with `secret`); else describes the set-up. */
  registerWebhook(creds: ProviderCredentials, webhookUrl: string, secret: string): Promise<WebhookSetup>;
  /** Sends one message (already within `maxMessageChars`) to a conversation; throws ProviderError. */
  send(creds: ProviderCredentials, conversationId: string, text: string): Promise<{ providerMessageId: string | null }>;
  /**
   * Verifies an inbound POST before anything else, then parses it: false from `verify` means 403. `secret` is the
   * channel's webhook secret (chat-bot: compared with its secret header); `creds.appSecret` signs business bodies.
   */
  verify(headers: Record<string, string | string[] | undefined>, rawBody: Buffer, secret: string, creds: ProviderCredentials | null): boolean;
  parse(rawBody: Buffer): InboundResult;
  /** A link that opens a chat with the account carrying `payload` (≤ 64 characters of [A-Za-z0-9_-]). */
  deepLink(identity: { accountName: string | null }, payload: string): string | null;
}

export type AdapterFactory = (config: ChannelsConfig) => ChannelAdapter;
