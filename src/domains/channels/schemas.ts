import { z } from 'zod';
import { PLANNED_PROVIDERS, PROVIDERS } from './providers/types.js';

const SecretNameField = z.string().trim().min(1).max(128).describe('The name of a stored secret (POST /v1/secrets)');
const Id = z.string().min(1).max(100);

export const ChannelParams = z.object({ channelId: Id });

/** Any provider word is accepted by the schema so that a planned one gets its own clear 400 (`provider_not_supported`). */
const ProviderField = z
  .string()
  .trim()
  .min(1)
  .max(64)
  .describe(`One of ${PROVIDERS.join(', ')}. Not built in this version: ${PLANNED_PROVIDERS.join(', ')}`);

export const CreateChannelBody = z
  .object({
    agent: z.string().trim().min(1).max(100).describe('Agent slug'),
    provider: ProviderField,
    mode: z.enum(['byok']).default('byok').describe('`byok`: the channel acts with your own provider credentials'),
    botTokenSecretName: SecretNameField.optional().describe('chatbot_provider: the secret holding the bot token'),
    accessTokenSecretName: SecretNameField.optional().describe('business_messaging_provider: the secret holding the access token'),
    appSecretSecretName: SecretNameField.optional().describe('business_messaging_provider: the secret holding the app secret (signs webhooks)'),
    phoneNumberId: z.string().trim().min(1).max(64).regex(/^\d+$/, 'must be the numeric phone number id').optional(),
    businessAccountId: z.string().trim().min(1).max(64).regex(/^\d+$/, 'must be the numeric business account id').optional(),
  })
  .strict();
export type CreateChannelBody = z.infer<typeof CreateChannelBody>;

export const UpdateChannelBody = z
  .object({
    agent: z.string().trim().min(1).max(100).optional().describe('Move the channel to another agent'),
    status: z.enum(['active', 'paused']).optional().describe('`paused`: inbound messages are stored and acknowledged but not answered'),
    botTokenSecretName: SecretNameField.optional(),
    accessTokenSecretName: SecretNameField.optional(),
    appSecretSecretName: SecretNameField.optional(),
  })
  .strict();
export type UpdateChannelBody = z.infer<typeof UpdateChannelBody>;

export const ChannelsQuery = z
  .object({
    agent: z.string().trim().min(1).max(100).optional().describe('Agent slug'),
    provider: ProviderField.optional(),
  })
  .strict();
export type ChannelsQuery = z.infer<typeof ChannelsQuery>;

export const PrivacyMode = z.enum(['approved_only', 'open', 'disabled']);
export const UnauthorizedReply = z.enum(['message', 'silent']);

export const Privacy = z
  .object({
    mode: PrivacyMode.describe(
      '`approved_only`: only granted conversations reach the agent, others make a pending request; `open`: everyone (within allowPrivateChats/allowGroups); `disabled`: nobody',
    ),
    allowPrivateChats: z.boolean(),
    allowGroups: z.boolean(),
    unauthorizedReply: UnauthorizedReply.describe('`message`: an unapproved sender is told once per window; `silent`: nothing is sent'),
    unauthorizedMessage: z.string().nullable().describe('The text sent to unapproved senders (null: the default text)'),
  })
  .meta({ id: 'ChannelPrivacy' });
export type Privacy = z.infer<typeof Privacy>;

export const PrivacyBody = z
  .object({
    mode: PrivacyMode.optional(),
    allowPrivateChats: z.boolean().optional(),
    allowGroups: z.boolean().optional(),
    unauthorizedReply: UnauthorizedReply.optional(),
    unauthorizedMessage: z.string().trim().min(1).max(1000).nullable().optional(),
  })
  .strict();
export type PrivacyBody = z.infer<typeof PrivacyBody>;

export const Channel = z
  .object({
    id: z.string(),
    agent: z.string().describe('Agent slug'),
    provider: z.enum(PROVIDERS),
    mode: z.literal('byok'),
    status: z.enum(['active', 'paused']),
    account: z.object({
      id: z.string().describe('The bot id, or the business phone number id'),
      name: z.string().nullable().describe('The bot username, or the display phone number'),
    }),
    businessAccountId: z.string().nullable(),
    secrets: z
      .object({
        botToken: z.string().optional(),
        accessToken: z.string().optional(),
        appSecret: z.string().optional(),
      })
      .describe('Names of the stored secrets the channel uses (values are never returned)'),
    webhook: z.object({
      url: z.string().describe('Where the provider must send updates'),
      registeredAt: z.string().nullable(),
    }),
    privacy: Privacy,
    createdAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'AgentChannel' });
export type Channel = z.infer<typeof Channel>;

export const ProviderAccount = z
  .object({
    provider: z.enum(PROVIDERS),
    accountId: z.string(),
    accountName: z.string().nullable(),
    channelId: z.string(),
    agent: z.string(),
  })
  .meta({ id: 'ChannelProviderAccount' });

export const ChannelList = z.object({ channels: z.array(Channel) });
export const AccountList = z.object({ accounts: z.array(ProviderAccount) });

export const ValidateParams = z.object({ provider: ProviderField });
export const ValidateBody = z
  .object({
    agent: z.string().trim().min(1).max(100),
    accessToken: z.string().min(1).max(4096).optional().describe('business_messaging_provider'),
    phoneNumberId: z.string().trim().min(1).max(64).optional(),
    businessAccountId: z.string().trim().min(1).max(64).optional(),
    botToken: z.string().min(1).max(256).optional().describe('chatbot_provider'),
  })
  .strict();
export type ValidateBody = z.infer<typeof ValidateBody>;

const Check = z.enum(['ok', 'invalid', 'not_found', 'mismatch', 'in_use', 'unchecked']);
export const ValidateResult = z
  .object({
    valid: z.boolean(),
    checks: z.record(z.string(), Check).describe('Each input checked: ok, or what is wrong with it'),
    problems: z.array(z.string()).describe('What is wrong, in words (empty when valid)'),
    account: z.object({ id: z.string(), name: z.string().nullable(), displayName: z.string().nullable() }).nullable(),
  })
  .meta({ id: 'ChannelValidation' });
export type ValidateResult = z.infer<typeof ValidateResult>;

export const WebhookRegistration = z
  .object({
    channelId: z.string(),
    provider: z.enum(PROVIDERS),
    registered: z.boolean().describe('true: Hangar set the webhook at the provider; false: paste `setup` into the provider’s settings'),
    setup: z.object({
      webhookUrl: z.string(),
      verifyToken: z.string().optional().describe('business_messaging_provider: the verify token to enter with the callback URL'),
    }),
  })
  .meta({ id: 'ChannelWebhookRegistration' });

export const PrivacyRequest = z
  .object({
    id: z.string(),
    channelId: z.string(),
    status: z.enum(['pending', 'approved', 'expired']),
    externalConversationId: z.string(),
    conversationType: z.enum(['private', 'group']),
    conversationDisplayName: z.string().nullable(),
    externalUserId: z.string(),
    displayName: z.string().nullable(),
    username: z.string().nullable(),
    firstMessage: z.string().nullable(),
    grantId: z.string().nullable(),
    createdAt: z.string(),
    expiresAt: z.string(),
    decidedAt: z.string().nullable(),
  })
  .meta({ id: 'ChannelPrivacyRequest' });
export type PrivacyRequest = z.infer<typeof PrivacyRequest>;

export const Grant = z
  .object({
    id: z.string(),
    channelId: z.string(),
    scope: z.literal('conversation'),
    externalConversationId: z.string(),
    conversationType: z.enum(['private', 'group']),
    conversationDisplayName: z.string().nullable(),
    status: z.enum(['granted', 'revoked']),
    requestId: z.string().nullable(),
    createdAt: z.string(),
    revokedAt: z.string().nullable(),
  })
  .meta({ id: 'ChannelPrivacyGrant' });
export type Grant = z.infer<typeof Grant>;

export const GrantBody = z
  .object({
    scope: z.literal('conversation').default('conversation'),
    externalConversationId: z.string().trim().min(1).max(128),
    conversationType: z.enum(['private', 'group']).default('private'),
    conversationDisplayName: z.string().trim().max(256).optional(),
  })
  .strict();
export type GrantBody = z.infer<typeof GrantBody>;

export const RequestParams = z.object({ channelId: Id, requestId: Id });
export const GrantParams = z.object({ channelId: Id, grantId: Id });
export const RequestsQuery = z.object({ status: z.enum(['pending', 'approved', 'expired']).optional() }).strict();
export const GrantsQuery = z.object({ status: z.enum(['granted', 'revoked']).optional() }).strict();

export const Message = z
  .object({
    id: z.string(),
    channelId: z.string(),
    externalConversationId: z.string(),
    conversationType: z.enum(['private', 'group']),
    senderId: z.string(),
    senderName: z.string().nullable(),
    text: z.string(),
    status: z.enum(['received', 'processing', 'replied', 'ignored', 'failed']),
    outcome: z.string().nullable().describe('Why it ended as it did: e.g. privacy_pending, unlinked, group_disabled, paused'),
    threadId: z.string().nullable(),
    runId: z.string().nullable(),
    attempts: z.number().int(),
    error: z.string().nullable(),
    receivedAt: z.string(),
    updatedAt: z.string(),
  })
  .meta({ id: 'ChannelMessage' });
export type Message = z.infer<typeof Message>;

export const MessagesQuery = z
  .object({
    status: z.enum(['received', 'processing', 'replied', 'ignored', 'failed']).optional(),
    limit: z.coerce.number().int().min(1).max(200).default(50),
  })
  .strict();
export type MessagesQuery = z.infer<typeof MessagesQuery>;
