import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { envelope, ErrorBody, errorResponses, ok } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import type { ActivityRegistry } from '../activity/index.js';
import { listChannelMessages, receiveWebhook, verifySubscription } from './messages.js';
import { approveRequest, createGrant, getPrivacy, listGrants, listPrivacyRequests, revokeGrant, updatePrivacy } from './privacy.js';
import {
  AccountList,
  Channel,
  ChannelList,
  ChannelParams,
  ChannelsQuery,
  CreateChannelBody,
  Grant,
  GrantBody,
  GrantParams,
  GrantsQuery,
  Message,
  MessagesQuery,
  Privacy,
  PrivacyBody,
  PrivacyRequest,
  RequestParams,
  RequestsQuery,
  UpdateChannelBody,
  ValidateBody,
  ValidateResult,
  WebhookRegistration,
} from './schemas.js';
import {
  canSeeChannel,
  createChannel,
  deleteChannel,
  getChannel,
  listChannels,
  registerWebhook,
  updateChannel,
  validateConnection,
} from './service.js';

const tags = ['channels'];
const Deleted = z.object({ deleted: z.literal(true) });

/** Activity filters on `agent_channel` resources: a channel of the caller's organization. */
export function registerChannelActivity(registry: ActivityRegistry): void {
  registry.resource('agent_channel', canSeeChannel);
}

const originOf = (req: { protocol: string; host: string }) => `${req.protocol}://${req.host}`;

export async function channelRoutes(app: App, deps: Deps) {
  app.get(
    '/v1/agent-channels',
    {
      config: { scope: 'channels:read' },
      schema: {
        tags,
        summary: 'List channels',
        description:
          'Filter by `agent` (slug) and `provider`. `provider` without `agent` lists the provider accounts connected in the organization instead: `{ accounts: [{ provider, accountId, accountName, channelId, agent }] }`.',
        querystring: ChannelsQuery,
        response: { 200: envelope(z.union([ChannelList, AccountList])), ...errorResponses },
      },
    },
    async (req) => {
      const r = await listChannels(req.ctx, req.query, originOf(req));
      return ok(req, r.kind === 'accounts' ? { accounts: r.accounts } : { channels: r.channels });
    },
  );

  app.post(
    '/v1/agent-channels',
    {
      config: { scope: 'channels:write' },
      schema: {
        tags,
        summary: 'Connect a channel to an agent',
        description: [
          '`{ agent, provider, mode: "byok" }` and, for `chatbot_provider`, `botTokenSecretName`; for `business_messaging_provider`, `accessTokenSecretName`, ',
          '`appSecretSecretName`, `phoneNumberId`, `businessAccountId` (secret-name fields name stored secrets, POST /v1/secrets). The credentials are checked ',
          'with the provider’s identity call before anything is saved (a refused token is 400 naming the field). One agent per provider account: a business ',
          'phone number (or bot) already connected is 409 `phone_number_in_use` (`conflict` for a bot). Other product channel kinds answer 400 ',
          '`provider_not_supported`. New channels start `approved_only`: set privacy with PATCH …/privacy, then POST …/register-webhook.',
        ].join(''),
        body: CreateChannelBody,
        response: { 201: envelope(Channel), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await createChannel(req.ctx, req.body, originOf(req)))),
  );

  app.post(
    '/v1/agent-channels/:channelId/validate-connection',
    {
      config: { scope: 'channels:write' },
      schema: {
        tags,
        summary: 'Check provider credentials before saving them',
        description: [
          'The path names the provider: `/v1/agent-channels/business_messaging_provider/validate-connection` with `{ agent, accessToken, phoneNumberId, businessAccountId }` ',
          'checks the token, that the phone number exists and belongs to the business account, and that no agent holds the number yet; ',
          '`/v1/agent-channels/chatbot_provider/validate-connection` with `{ agent, botToken }` checks the bot token. Nothing is saved. ',
          'Answers `{ valid, checks, problems, account }`: each input `ok` or what is wrong with it.',
        ].join(''),
        params: z.object({ channelId: z.string().min(1).max(64).describe('The provider') }),
        body: ValidateBody,
        response: { 200: envelope(ValidateResult), ...errorResponses },
      },
    },
    async (req) => ok(req, await validateConnection(req.ctx, req.params.channelId, req.body)),
  );

  app.get(
    '/v1/agent-channels/:channelId',
    {
      config: { scope: 'channels:read' },
      schema: { tags, summary: 'Get a channel', params: ChannelParams, response: { 200: envelope(Channel), ...errorResponses } },
    },
    async (req) => ok(req, await getChannel(req.ctx, req.params.channelId, originOf(req))),
  );

  app.patch(
    '/v1/agent-channels/:channelId',
    {
      config: { scope: 'channels:write' },
      schema: {
        tags,
        summary: 'Change a channel',
        description:
          '`agent` moves it to another agent; `status` `paused` keeps acknowledging and storing messages without answering; new secret names are checked with the provider and must belong to the same account.',
        params: ChannelParams,
        body: UpdateChannelBody,
        response: { 200: envelope(Channel), ...errorResponses },
      },
    },
    async (req) => ok(req, await updateChannel(req.ctx, req.params.channelId, req.body, originOf(req))),
  );

  app.delete(
    '/v1/agent-channels/:channelId',
    {
      config: { scope: 'channels:write' },
      schema: {
        tags,
        summary: 'Delete a channel',
        description: 'Its messages, privacy requests and grants, and product bindings and links go with it; its webhook then answers 404.',
        params: ChannelParams,
        response: { 200: envelope(Deleted), ...errorResponses },
      },
    },
    async (req) => {
      await deleteChannel(req.ctx, req.params.channelId);
      return ok(req, { deleted: true as const });
    },
  );

  app.post(
    '/v1/agent-channels/:channelId/register-webhook',
    {
      config: { scope: 'channels:write' },
      schema: {
        tags,
        summary: 'Set up the provider’s webhook',
        description: [
          '`chatbot_provider`: Hangar calls the provider’s setWebhook with the channel’s webhook URL and a secret token it generated (`registered: true`). ',
          '`business_messaging_provider`: answers `setup.webhookUrl` and `setup.verifyToken` to enter in the provider’s app settings (`registered: false`). ',
          'The webhook URL uses HANGAR_BASE_URL when set, else this request’s origin.',
        ].join(''),
        params: ChannelParams,
        response: { 200: envelope(WebhookRegistration), ...errorResponses },
      },
    },
    async (req) => ok(req, await registerWebhook(req.ctx, req.params.channelId, originOf(req))),
  );

  app.get(
    '/v1/agent-channels/:channelId/privacy',
    {
      config: { scope: 'channels:read' },
      schema: { tags, summary: 'Privacy settings of a channel', params: ChannelParams, response: { 200: envelope(Privacy), ...errorResponses } },
    },
    async (req) => ok(req, await getPrivacy(req.ctx, req.params.channelId)),
  );

  app.patch(
    '/v1/agent-channels/:channelId/privacy',
    {
      config: { scope: 'channels:write' },
      schema: {
        tags,
        summary: 'Change privacy settings',
        description: [
          '`mode`: `approved_only` (a conversation needs a grant; a stranger makes a pending request), `open` (anyone), `disabled` (no one); ',
          '`allowPrivateChats`, `allowGroups` bound every mode; `unauthorizedReply` `message` (a stranger is told once per window, ',
          'HANGAR_CHANNELS_REPLY_WINDOW_SECONDS, with `unauthorizedMessage` or the default text) or `silent`.',
        ].join(''),
        params: ChannelParams,
        body: PrivacyBody,
        response: { 200: envelope(Privacy), ...errorResponses },
      },
    },
    async (req) => ok(req, await updatePrivacy(req.ctx, req.params.channelId, req.body)),
  );

  app.get(
    '/v1/agent-channels/:channelId/privacy/requests',
    {
      config: { scope: 'channels:read' },
      schema: {
        tags,
        summary: 'Access requests of unknown senders',
        description: 'One per conversation, newest first; `status` pending (until it expires), approved or expired.',
        params: ChannelParams,
        querystring: RequestsQuery,
        response: { 200: envelope(z.object({ requests: z.array(PrivacyRequest) })), ...errorResponses },
      },
    },
    async (req) => ok(req, { requests: await listPrivacyRequests(req.ctx, req.params.channelId, req.query.status) }),
  );

  app.post(
    '/v1/agent-channels/:channelId/privacy/requests/:requestId/approve',
    {
      config: { scope: 'channels:write' },
      schema: {
        tags,
        summary: 'Approve an access request',
        description:
          'The request’s conversation gets a grant (for its conversation type only: a private chat’s approval never opens a group). Already approved 409 `invalid_state`; expired 410 `link_expired`.',
        params: RequestParams,
        response: { 200: envelope(z.object({ request: PrivacyRequest, grant: Grant })), ...errorResponses, 410: ErrorBody },
      },
    },
    async (req) => ok(req, await approveRequest(req.ctx, req.params.channelId, req.params.requestId)),
  );

  app.get(
    '/v1/agent-channels/:channelId/privacy/grants',
    {
      config: { scope: 'channels:read' },
      schema: {
        tags,
        summary: 'Grants of a channel',
        params: ChannelParams,
        querystring: GrantsQuery,
        response: { 200: envelope(z.object({ grants: z.array(Grant) })), ...errorResponses },
      },
    },
    async (req) => ok(req, { grants: await listGrants(req.ctx, req.params.channelId, req.query.status) }),
  );

  app.post(
    '/v1/agent-channels/:channelId/privacy/grants',
    {
      config: { scope: 'channels:write' },
      schema: {
        tags,
        summary: 'Grant a conversation access',
        description:
          '`{ scope: "conversation", externalConversationId, conversationType: "private" | "group", conversationDisplayName }`. A conversation with a live grant is 409 `conflict`; a pending request of it is approved with it.',
        params: ChannelParams,
        body: GrantBody,
        response: { 201: envelope(Grant), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await createGrant(req.ctx, req.params.channelId, req.body))),
  );

  app.delete(
    '/v1/agent-channels/:channelId/privacy/grants/:grantId',
    {
      config: { scope: 'channels:write' },
      schema: {
        tags,
        summary: 'Revoke a grant',
        description:
          'Access ends at once: the conversation’s next message is treated as a stranger’s. Answers the revoked grant (again for one revoked before).',
        params: GrantParams,
        response: { 200: envelope(Grant), ...errorResponses },
      },
    },
    async (req) => ok(req, await revokeGrant(req.ctx, req.params.channelId, req.params.grantId)),
  );

  app.get(
    '/v1/agent-channels/:channelId/messages',
    {
      config: { scope: 'channels:read' },
      schema: {
        tags,
        summary: 'Inbound messages of a channel',
        description: 'Newest first, with what became of each (`status`, `outcome`, its thread and run, the last error).',
        params: ChannelParams,
        querystring: MessagesQuery,
        response: { 200: envelope(z.object({ messages: z.array(Message) })), ...errorResponses },
      },
    },
    async (req) => ok(req, { messages: await listChannelMessages(req.ctx, req.params.channelId, req.query) }),
  );

  app.get(
    '/v1/agent-channels/:channelId/webhook',
    {
      config: { auth: 'none' },
      schema: {
        tags,
        summary: 'Provider webhook verification (business provider)',
        description:
          'Called by the business messaging provider when its callback URL is saved: echoes `hub.challenge` (text/plain) only for `hub.mode=subscribe` with the channel’s `hub.verify_token`; otherwise 403.',
        security: [],
        params: ChannelParams,
        // Named parameters, not a record: a record becomes invalid OpenAPI parameters that code generators refuse.
        querystring: z.object({
          'hub.mode': z.string().max(1000).optional(),
          'hub.verify_token': z.string().max(1000).optional(),
          'hub.challenge': z.string().max(1000).optional(),
        }),
        response: { 200: z.string(), ...errorResponses },
      },
    },
    async (req, reply) => reply.type('text/plain; charset=utf-8').send(await verifySubscription(deps, req.params.channelId, req.query)),
  );

  // Providers sign the exact bytes they send: this route alone takes the JSON body raw.
  await app.register(async (scoped: App) => {
    scoped.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
    scoped.post(
      '/v1/agent-channels/:channelId/webhook',
      {
        config: { auth: 'none' },
        schema: {
          tags,
          summary: 'Provider webhook (inbound messages)',
          description: [
            'Called by the provider, not by API clients. Verified before anything else: the chat-bot provider’s `X-Telegram-Bot-Api-Secret-Token` must be the ',
            'channel’s secret token; the business provider’s `X-Hub-Signature-256` must be the HMAC-SHA256 of the raw body with the channel’s app secret. ',
            'Unverified 403 (also when no secret is configured); a body that is not the provider’s format 400. Each message is stored once (the provider’s ',
            'update or message id deduplicates its retries) and answered asynchronously; 200 as soon as it is stored. Business events are routed by phone ',
            'number id; events for a number no channel holds are dropped and logged.',
          ].join(''),
          security: [],
          params: ChannelParams,
          response: {
            200: envelope(z.object({ received: z.literal(true), accepted: z.number().int(), duplicates: z.number().int() })),
            ...errorResponses,
          },
        },
      },
      async (req) => {
        const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
        const r = await receiveWebhook(deps, req.params.channelId, req.headers, raw);
        return ok(req, { received: true as const, accepted: r.accepted, duplicates: r.duplicates });
      },
    );
  });
}
