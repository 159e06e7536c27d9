import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { envelope, ErrorBody, errorResponses, ok } from '../../platform/http/envelope.js';
import type { App as HttpApp } from '../../platform/http/server.js';
import { OAuthConnection, OAuthStart } from '../oauth/index.js';
import {
  completeLinkSession,
  createApp,
  createBinding,
  createLinkSession,
  deleteApp,
  deleteBinding,
  getApp,
  importLink,
  listApps,
  listBindings,
  listEndUserConnections,
  listLinks,
  revokeLink,
  startEndUserConnection,
} from './product.js';
import {
  App,
  AppParams,
  Binding,
  BindingParams,
  CompleteSessionBody,
  CreateAppBody,
  CreateBindingBody,
  CreateSessionBody,
  Deleted,
  EndUserConnectBody,
  EndUserParams,
  EndUserProviderParams,
  ImportLinkBody,
  Link,
  LinkParams,
  LinkSession,
  LinksQuery,
  SessionParams,
} from './product-schemas.js';

const tags = ['product channels'];

/** Product apps, their channel bindings, link sessions, channel identity links and end users' connections. */
export async function productRoutes(app: HttpApp, _deps: Deps) {
  app.post(
    '/v1/apps',
    {
      config: { scope: 'apps:write' },
      schema: {
        tags,
        summary: 'Create a product app',
        description:
          'A product app is what a builder’s product is called here: the `{appSlug}` its channel bindings and linked users live under. `slug`: 2-64 of lowercase a-z, 0-9 and -, unique in the organization (409 `conflict` when taken).',
        body: CreateAppBody,
        response: { 201: envelope(App), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await createApp(req.ctx, req.body))),
  );

  app.get(
    '/v1/apps',
    {
      config: { scope: 'apps:read' },
      schema: {
        tags,
        summary: 'List product apps',
        description: 'The organization’s product apps, oldest first.',
        response: { 200: envelope(z.array(App)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listApps(req.ctx)),
  );

  app.get(
    '/v1/apps/:appSlug',
    {
      config: { scope: 'apps:read' },
      schema: { tags, summary: 'A product app', params: AppParams, response: { 200: envelope(App), ...errorResponses } },
    },
    async (req) => ok(req, await getApp(req.ctx, req.params.appSlug)),
  );

  app.delete(
    '/v1/apps/:appSlug',
    {
      config: { scope: 'apps:write' },
      schema: {
        tags,
        summary: 'Delete a product app',
        description:
          'Deletes the app with its channel bindings, link sessions, channel links and end users: its channels stop answering as the product.',
        params: AppParams,
        response: { 200: envelope(Deleted), ...errorResponses },
      },
    },
    async (req) => ok(req, await deleteApp(req.ctx, req.params.appSlug)),
  );

  app.post(
    '/v1/apps/:appSlug/channel-bindings',
    {
      config: { scope: 'apps:write' },
      schema: {
        tags,
        summary: 'Bind a channel to the product app',
        description: [
          'The channel (`agentChannelId`, one of the organization’s agent channels) then answers only senders linked to a product user (`identityPolicy` must be `link_required`); ',
          'its runs act as that user. `groupPolicy`: `disabled` (default; group messages are ignored) or `sender_scoped` (each linked sender in a group has their own conversation). ',
          '`unknownSenderReply` (at most 2000 characters) answers an unlinked sender; `{appName}` and `{linkUrl}` are filled in, `{linkUrl}` being `metadata.linkUrl` ',
          '(your product’s link page: https, or http on loopback; required when the reply uses it) with `linkSession` and `token` added. `metadata`: an object of at most 8 KB. ',
          'A channel is bound to one app at most: 409 (`channel_already_bound` in the message) otherwise.',
        ].join(''),
        params: AppParams,
        body: CreateBindingBody,
        response: { 201: envelope(Binding), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await createBinding(req.ctx, req.params.appSlug, req.body))),
  );

  app.get(
    '/v1/apps/:appSlug/channel-bindings',
    {
      config: { scope: 'apps:read' },
      schema: {
        tags,
        summary: 'List the app’s channel bindings',
        params: AppParams,
        response: { 200: envelope(z.array(Binding)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listBindings(req.ctx, req.params.appSlug)),
  );

  app.delete(
    '/v1/apps/:appSlug/channel-bindings/:bindingId',
    {
      config: { scope: 'apps:write' },
      schema: {
        tags,
        summary: 'Delete a channel binding',
        description: 'The channel stops answering as the product; its links are kept (they apply again if the channel is bound to this app again).',
        params: BindingParams,
        response: { 200: envelope(Deleted), ...errorResponses },
      },
    },
    async (req) => ok(req, await deleteBinding(req.ctx, req.params.appSlug, req.params.bindingId)),
  );

  app.post(
    '/v1/apps/:appSlug/channel-link-sessions',
    {
      config: { scope: 'apps:write' },
      schema: {
        tags,
        summary: 'Start linking a chat account to a product user',
        description: [
          'Called by the product’s server for a signed-in user. Answers a single-use `token` (`pcl_…`, at most 64 characters of [A-Za-z0-9_-], shown only here) and `deepLink`, ',
          'which opens a chat with the channel’s account carrying it; the user’s chat account presents it there and is told to finish in the product. ',
          'The product then completes the session. `externalUserId`: the chat sender, when the product knows it. `productExternalUserId`: the product user starting the link ',
          '(completing must name the same one). `returnUrl`: where the chat reply sends the sender to finish (https, or http on loopback; `linkSession` is added). ',
          'The channel must be bound to this app (409, `channel_not_bound` in the message). Expires after the configured link TTL.',
        ].join(''),
        params: AppParams,
        body: CreateSessionBody,
        response: { 201: envelope(LinkSession), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await createLinkSession(req.ctx, req.params.appSlug, req.body))),
  );

  app.post(
    '/v1/apps/:appSlug/channel-link-sessions/:sessionId/complete',
    {
      config: { scope: 'apps:write' },
      schema: {
        tags,
        summary: 'Complete a link session',
        description: [
          'Called by the product’s server after it verified its user: links the session’s chat sender to `productExternalUserId` and answers the link. ',
          'Errors: unknown session 404; a token that does not match 400 (`invalid_token`); expired 410 `link_expired`; already used 409 `invalid_state` (`already_completed`); ',
          'started for another product user 403 (`wrong_user`); a `providerExternalUserId` other than the sender the session knows 409 (`sender_mismatch`); ',
          'no sender known and none given 400 naming `providerExternalUserId`; the channel no longer bound to this app 409 (`channel_not_bound`). ',
          'The sender’s earlier active link on the channel is revoked.',
        ].join(''),
        params: SessionParams,
        body: CompleteSessionBody,
        response: { 201: envelope(Link), ...errorResponses, 410: ErrorBody },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await completeLinkSession(req.ctx, req.params.appSlug, req.params.sessionId, req.body))),
  );

  app.post(
    '/v1/apps/:appSlug/channel-links',
    {
      config: { scope: 'apps:write' },
      schema: {
        tags,
        summary: 'Import a channel link (trusted)',
        description:
          'Links chat sender `externalUserId` on `agentChannelId` (bound to this app) to `productExternalUserId` directly, for links the product already verified. The sender’s other active link on the channel is revoked; the same link again answers the existing one.',
        params: AppParams,
        body: ImportLinkBody,
        response: { 201: envelope(Link), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await importLink(req.ctx, req.params.appSlug, req.body))),
  );

  app.get(
    '/v1/apps/:appSlug/channel-links',
    {
      config: { scope: 'apps:read' },
      schema: {
        tags,
        summary: 'List channel links',
        description:
          'Active and revoked links of the app, newest first (at most 500); filter by `agentChannelId`, `productExternalUserId`, `status`.',
        params: AppParams,
        querystring: LinksQuery,
        response: { 200: envelope(z.array(Link)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listLinks(req.ctx, req.params.appSlug, req.query)),
  );

  app.post(
    '/v1/apps/:appSlug/channel-links/:linkId/revoke',
    {
      config: { scope: 'apps:write' },
      schema: {
        tags,
        summary: 'Revoke a channel link',
        description: 'The sender is no longer linked: their messages get the unknown-sender reply again. A revoked link answers as it is.',
        params: LinkParams,
        response: { 200: envelope(Link), ...errorResponses },
      },
    },
    async (req) => ok(req, await revokeLink(req.ctx, req.params.appSlug, req.params.linkId)),
  );

  app.post(
    '/v1/apps/:appSlug/end-users/:productExternalUserId/connections/:provider/start',
    {
      config: { scope: 'apps:write' },
      schema: {
        tags,
        summary: 'Start connecting an account for a product end user',
        description:
          'For a product user with a channel link: starts the OAuth browser flow as that end user (the connection is theirs alone; product channels never use the builder’s connected accounts). Send the user to `authUrl`. `returnUrl` must be allowed as for `/v1/oauth/start`. 404 for an unknown end user.',
        params: EndUserProviderParams,
        body: EndUserConnectBody,
        response: { 200: envelope(OAuthStart), ...errorResponses },
      },
    },
    async (req) =>
      ok(req, await startEndUserConnection(req.ctx, req.params.appSlug, req.params.productExternalUserId, req.params.provider, req.body)),
  );

  app.get(
    '/v1/apps/:appSlug/end-users/:productExternalUserId/connections',
    {
      config: { scope: 'apps:read' },
      schema: {
        tags,
        summary: 'A product end user’s connected accounts',
        params: EndUserParams,
        response: { 200: envelope(z.array(OAuthConnection)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listEndUserConnections(req.ctx, req.params.appSlug, req.params.productExternalUserId)),
  );
}
