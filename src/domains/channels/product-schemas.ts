/** Zod schemas of product apps, channel bindings, link sessions, channel identity links and end-user connections. */
import { z } from 'zod';
import { jsonDepth } from '../../platform/http/json-depth.js';

/** The most bytes a binding's `metadata` may take as JSON, and its deepest nesting. */
export const MAX_METADATA_BYTES = 8 * 1024;
export const MAX_METADATA_DEPTH = 8;

/** An identifier a product or a provider chose (a user id, a chat id): bounded, no control characters. */
const ExternalId = z
  .string()
  .trim()
  .min(1)
  .max(256)
  .regex(/^[^\p{Cc}]*$/u, 'must not contain control characters');
const Text256 = z.string().max(256);

export const AppSlug = z
  .string()
  .min(2)
  .max(64)
  .regex(/^[a-z0-9-]+$/, 'must be 2-64 characters of lowercase a-z, 0-9 and -');

export const AppParams = z.object({ appSlug: AppSlug });
export const BindingParams = z.object({ appSlug: AppSlug, bindingId: z.string().min(1).max(100) });
export const SessionParams = z.object({ appSlug: AppSlug, sessionId: z.string().min(1).max(100) });
export const LinkParams = z.object({ appSlug: AppSlug, linkId: z.string().min(1).max(100) });
export const EndUserParams = z.object({ appSlug: AppSlug, productExternalUserId: ExternalId });
export const EndUserProviderParams = EndUserParams.extend({ provider: z.string().min(1).max(100) });

export const CreateAppBody = z.object({ slug: AppSlug, name: z.string().trim().min(1).max(200) }).strict();
export type CreateAppBody = z.infer<typeof CreateAppBody>;

export const App = z
  .object({ id: z.string(), slug: z.string(), name: z.string(), createdAt: z.string(), updatedAt: z.string() })
  .meta({ id: 'ProductApp' });
export type App = z.infer<typeof App>;

export const Deleted = z.object({ deleted: z.literal(true) });

export const DEFAULT_UNKNOWN_SENDER_REPLY = 'To chat here, link your {appName} account: {linkUrl}';

const Metadata = z
  .record(z.string(), z.unknown())
  .refine((m) => jsonDepth(m, MAX_METADATA_DEPTH) <= MAX_METADATA_DEPTH, `must nest at most ${MAX_METADATA_DEPTH} levels deep`)
  .refine((m) => Buffer.byteLength(JSON.stringify(m)) <= MAX_METADATA_BYTES, `must be at most ${MAX_METADATA_BYTES} bytes as JSON`);

export const CreateBindingBody = z
  .object({
    agentChannelId: z.string().min(1).max(100),
    identityPolicy: z.literal('link_required', {
      error: 'must be "link_required": a product channel answers only senders linked to a product user',
    }),
    groupPolicy: z.enum(['disabled', 'sender_scoped']).default('disabled'),
    unknownSenderReply: z.string().min(1).max(2000).default(DEFAULT_UNKNOWN_SENDER_REPLY),
    metadata: Metadata.default({}),
  })
  .strict();
export type CreateBindingBody = z.infer<typeof CreateBindingBody>;

export const Binding = z
  .object({
    id: z.string(),
    appSlug: z.string(),
    agentChannelId: z.string(),
    identityPolicy: z.literal('link_required'),
    groupPolicy: z.enum(['disabled', 'sender_scoped']),
    unknownSenderReply: z.string(),
    metadata: z.record(z.string(), z.unknown()),
    createdAt: z.string(),
  })
  .meta({ id: 'ChannelBinding' });
export type Binding = z.infer<typeof Binding>;

export const CreateSessionBody = z
  .object({
    agentChannelId: z.string().min(1).max(100),
    externalUserId: ExternalId.optional().describe('The chat sender’s provider user id, when the product knows it'),
    returnUrl: z.string().max(2000).optional().describe('Where the product finishes linking: https, or http on loopback'),
    productExternalUserId: ExternalId.optional().describe(
      'The product user who starts the link: completing must name the same one (the person finishing is the one who started)',
    ),
  })
  .strict();
export type CreateSessionBody = z.infer<typeof CreateSessionBody>;

export const LinkSession = z
  .object({
    id: z.string(),
    token: z.string().describe('`pcl_…`, at most 64 characters of [A-Za-z0-9_-]; shown only here, single use'),
    deepLink: z.string().nullable().describe('Opens a chat with the channel’s account carrying the token'),
    expiresAt: z.string(),
    status: z.literal('created'),
    agentChannelId: z.string(),
    externalUserId: z.string().nullable(),
    returnUrl: z.string().nullable(),
  })
  .meta({ id: 'ChannelLinkSession' });
export type LinkSession = z.infer<typeof LinkSession>;

export const CompleteSessionBody = z
  .object({
    token: z.string().min(1).max(256),
    productExternalUserId: ExternalId,
    providerExternalUserId: ExternalId.optional(),
    externalConversationId: ExternalId.optional(),
    displayName: Text256.optional(),
    username: Text256.optional(),
  })
  .strict();
export type CompleteSessionBody = z.infer<typeof CompleteSessionBody>;

export const ImportLinkBody = z
  .object({
    agentChannelId: z.string().min(1).max(100),
    externalUserId: ExternalId,
    productExternalUserId: ExternalId,
    externalConversationId: ExternalId.optional(),
  })
  .strict();
export type ImportLinkBody = z.infer<typeof ImportLinkBody>;

export const LinksQuery = z
  .object({
    agentChannelId: z.string().min(1).max(100).optional(),
    productExternalUserId: ExternalId.optional(),
    status: z.enum(['active', 'revoked']).optional(),
  })
  .strict();
export type LinksQuery = z.infer<typeof LinksQuery>;

export const Link = z
  .object({
    id: z.string(),
    appSlug: z.string(),
    agentChannelId: z.string(),
    productExternalUserId: z.string(),
    providerExternalUserId: z.string(),
    externalConversationId: z.string().nullable(),
    displayName: z.string().nullable(),
    username: z.string().nullable(),
    source: z.enum(['session', 'import']),
    status: z.enum(['active', 'revoked']),
    createdAt: z.string(),
    revokedAt: z.string().nullable(),
  })
  .meta({ id: 'ChannelLink' });
export type Link = z.infer<typeof Link>;

export const EndUserConnectBody = z
  .object({
    scopes: z.array(z.string().min(1).max(200)).max(50).optional(),
    returnUrl: z.string().max(2000).optional(),
  })
  .strict()
  .default({});
export type EndUserConnectBody = z.infer<typeof EndUserConnectBody>;
