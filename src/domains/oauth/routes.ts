import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { envelope, errorResponses, ok } from '../../platform/http/envelope.js';
import { credentialOf, type App } from '../../platform/http/server.js';
import {
  DeviceStart,
  DeviceStatus,
  OAuthConfigView,
  OAuthConnection,
  OAuthProvider,
  OAuthStart,
  ProviderSlug,
  ProviderStatus,
  ScopeList,
} from './schemas.js';
import {
  deleteConfig,
  deleteConnection,
  finishBrowserFlow,
  getConnection,
  listConfigs,
  listConnections,
  listProviders,
  pollDeviceFlow,
  providerStatus,
  providers,
  putConfig,
  setConfigEnabled,
  setDefaultConnection,
  startBrowserFlow,
  startDeviceFlow,
  type CallbackResult,
} from './service.js';

const tags = ['oauth'];
const ProviderParams = z.object({ provider: ProviderSlug });
const IdParams = z.object({ id: z.string().min(1).max(100) });
const NO_STORE = { 'cache-control': 'no-store' };

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** The small page a browser lands on when the flow has nowhere to return to. */
function resultPage(r: CallbackResult): string {
  const title = r.ok ? 'Account connected' : 'Connection failed';
  return [
    '<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">',
    `<title>${title} · Hangar</title>`,
    '<style>body{font:16px/1.5 system-ui,sans-serif;max-width:34rem;margin:4rem auto;padding:0 1rem;color:#222}h1{font-size:1.4rem}</style>',
    `</head><body><h1>${title}</h1><p>${escapeHtml(r.message)}</p>`,
    r.ok ? '<p>You can close this window.</p>' : '',
    '</body></html>',
  ].join('');
}

export async function oauthRoutes(app: App, deps: Deps) {
  providers(deps); // a bad providers file stops start-up with a ConfigError naming it

  app.get(
    '/v1/oauth/providers',
    {
      config: { scope: 'connections:read' },
      schema: {
        tags,
        summary: 'Provider catalogue',
        description:
          'Every provider this installation defines (built in, or added by the operator with `HANGAR_OAUTH_PROVIDERS_FILE`), how it connects, and whether this organization can connect it now.',
        response: { 200: envelope(z.array(OAuthProvider)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listProviders(req.ctx)),
  );

  app.get(
    '/v1/oauth/start/:provider',
    {
      config: { scope: 'connections:write' },
      schema: {
        tags,
        summary: 'Start connecting an account in a browser',
        description: [
          'Answers the provider’s authorization URL for the user to open. The flow is bound to the caller, single use and ',
          'valid for 10 minutes; PKCE is used unless the provider opts out. After consent the provider redirects to ',
          '`GET /v1/oauth/callback`, which stores the connection and redirects to `returnUrl` (with `oauth=connected` or ',
          '`oauth=error`) or shows a short page. `scopes` (comma- or space-separated) replaces the default scopes; ',
          '`returnUrl` must be on the auth service’s origin or the operator’s `HANGAR_OAUTH_RETURN_URLS`.',
        ].join(''),
        params: ProviderParams,
        querystring: z.object({ scopes: ScopeList.optional(), returnUrl: z.string().max(2000).optional() }),
        response: { 200: envelope(OAuthStart), ...errorResponses },
      },
    },
    async (req, reply) => reply.headers(NO_STORE).send(ok(req, await startBrowserFlow(req.ctx, { provider: req.params.provider, ...req.query }))),
  );

  app.get(
    '/v1/oauth/callback',
    {
      config: { auth: 'none' },
      // The query holds the authorization code and the state: request logs show the path only.
      logSerializers: { req: (req: { method: string }) => ({ method: req.method, url: '/v1/oauth/callback?(redacted)' }) },
      schema: {
        tags,
        summary: 'Where the provider sends the browser back',
        description: [
          'Not called by clients: the redirect URI to register at the provider (`<auth service URL>/v1/oauth/callback`). ',
          'Takes no credential (the single-use `state` identifies the flow); when the browser does send one, it must be the ',
          'user who started the flow. Redirects (303) to the flow’s `returnUrl` with `oauth=connected&provider=…&connectionId=…` ',
          'or `oauth=error&provider=…&error=…`, or answers a small HTML page (200, or 400 on failure).',
        ].join(''),
        querystring: z
          .object({
            state: z.string().max(2000).optional(),
            code: z.string().max(4096).optional(),
            error: z.string().max(200).optional(),
            error_description: z.string().max(2000).optional(),
          })
          .passthrough(),
      },
    },
    async (req, reply) => {
      let callerUserId: string | null = null;
      const { credential, orgIdHint } = credentialOf(req);
      if (credential.apiKey || credential.bearer) {
        // A credential that does not authenticate is refused like anywhere else: a caller that sends one means it.
        callerUserId = (await app.authenticate(credential, orgIdHint)).userId;
      }
      const result = await finishBrowserFlow(deps, {
        state: req.query.state,
        code: req.query.code,
        error: req.query.error,
        errorDescription: req.query.error_description,
        callerUserId,
        requestId: req.id,
      });
      reply.headers(NO_STORE);
      if (result.returnUrl) {
        const url = new URL(result.returnUrl);
        url.searchParams.set('oauth', result.ok ? 'connected' : 'error');
        if (result.provider) url.searchParams.set('provider', result.provider);
        if (result.connection) url.searchParams.set('connectionId', result.connection.id);
        if (result.error) url.searchParams.set('error', result.error);
        return reply.redirect(url.toString(), 303);
      }
      return reply
        .status(result.ok ? 200 : 400)
        .type('text/html; charset=utf-8')
        .send(resultPage(result));
    },
  );

  app.post(
    '/v1/oauth/device/start/:provider',
    {
      config: { scope: 'connections:write' },
      schema: {
        tags,
        summary: 'Start a device-code flow (RFC 8628)',
        description:
          'Only for a provider whose definition offers `device_code`. Show `user_code` and `verification_uri` to the user, then poll `POST /v1/oauth/device/status/{provider}` with `attemptId` every `interval` seconds.',
        params: ProviderParams,
        body: z.object({ scopes: ScopeList.optional() }).strict().nullish(),
        response: { 200: envelope(DeviceStart), ...errorResponses },
      },
    },
    async (req, reply) =>
      reply.headers(NO_STORE).send(ok(req, await startDeviceFlow(req.ctx, { provider: req.params.provider, scopes: req.body?.scopes }))),
  );

  app.post(
    '/v1/oauth/device/status/:provider',
    {
      config: { scope: 'connections:write' },
      schema: {
        tags,
        summary: 'Poll a device-code flow',
        description: [
          '`pending`: not approved yet; `slow_down`: poll less often (the new `interval`, kept for later polls); `completed` with the ',
          'connection; `denied`, `expired` or `failed` end the attempt. The provider is asked at most once per `interval`; a faster ',
          'poll is answered `pending` without asking.',
        ].join(''),
        params: ProviderParams,
        body: z.object({ attemptId: z.string().min(1).max(100) }).strict(),
        response: { 200: envelope(DeviceStatus), ...errorResponses },
      },
    },
    async (req, reply) =>
      reply.headers(NO_STORE).send(ok(req, await pollDeviceFlow(req.ctx, { provider: req.params.provider, attemptId: req.body.attemptId }))),
  );

  app.get(
    '/v1/oauth/connections',
    {
      config: { scope: 'connections:read' },
      schema: {
        tags,
        summary: 'Your connections',
        description: 'Metadata only: tokens never leave the server. Other members’ connections are not listed, also not to admins.',
        querystring: z.object({ provider: ProviderSlug.optional() }),
        response: { 200: envelope(z.array(OAuthConnection)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listConnections(req.ctx, req.query.provider)),
  );

  app.get(
    '/v1/oauth/connections/:id',
    {
      config: { scope: 'connections:read' },
      schema: { tags, summary: 'A connection', params: IdParams, response: { 200: envelope(OAuthConnection), ...errorResponses } },
    },
    async (req) => ok(req, await getConnection(req.ctx, req.params.id)),
  );

  app.delete(
    '/v1/oauth/connections/:id',
    {
      config: { scope: 'connections:write' },
      schema: {
        tags,
        summary: 'Disconnect',
        description:
          'Revokes the tokens at the provider when it supports revocation (RFC 7009), then deletes the connection. `revokedAtProvider` says whether the provider was told; the connection is deleted either way.',
        params: IdParams,
        response: {
          200: envelope(
            z.object({ id: z.string(), deleted: z.literal(true), revokedAtProvider: z.boolean(), revocationError: z.string().nullable() }),
          ),
          ...errorResponses,
        },
      },
    },
    async (req) => ok(req, { deleted: true as const, ...(await deleteConnection(req.ctx, req.params.id)) }),
  );

  app.post(
    '/v1/oauth/connections/:id/set-default',
    {
      config: { scope: 'connections:write' },
      schema: {
        tags,
        summary: 'Make a connection the default for its provider',
        description: 'Tools use the default connection unless a request names another with `oauth.account`.',
        params: IdParams,
        response: { 200: envelope(OAuthConnection), ...errorResponses },
      },
    },
    async (req) => ok(req, await setDefaultConnection(req.ctx, req.params.id)),
  );

  app.get(
    '/v1/oauth/status/:provider',
    {
      config: { scope: 'connections:read' },
      schema: {
        tags,
        summary: 'Whether you have connected a provider',
        params: ProviderParams,
        response: { 200: envelope(ProviderStatus), ...errorResponses },
      },
    },
    async (req) => ok(req, await providerStatus(req.ctx, req.params.provider)),
  );

  app.get(
    '/v1/oauth/configs',
    {
      config: { scope: 'credentials:admin' },
      schema: {
        tags,
        summary: 'Bring-your-own-app configs',
        description: 'The organization’s own OAuth clients. The client secret is never returned, only its last four characters.',
        response: { 200: envelope(z.array(OAuthConfigView)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listConfigs(req.ctx)),
  );

  app.post(
    '/v1/oauth/configs',
    {
      config: { scope: 'credentials:admin' },
      schema: {
        tags,
        summary: 'Create or replace a bring-your-own-app config',
        description:
          'The organization’s own client for a provider; it takes precedence over the platform’s. `client_secret` is encrypted and write-only; `scopes` (comma-separated) replaces the provider’s default scopes. 201 when created, 200 when replaced.',
        body: z
          .object({
            provider: ProviderSlug,
            client_id: z.string().min(1).max(500),
            client_secret: z.string().min(1).max(4096),
            scopes: ScopeList.optional(),
          })
          .strict(),
        response: { 200: envelope(OAuthConfigView), 201: envelope(OAuthConfigView), ...errorResponses },
      },
    },
    async (req, reply) => {
      const { config, created } = await putConfig(req.ctx, {
        provider: req.body.provider,
        clientId: req.body.client_id,
        clientSecret: req.body.client_secret,
        scopes: req.body.scopes,
      });
      return reply.status(created ? 201 : 200).send(ok(req, config));
    },
  );

  app.patch(
    '/v1/oauth/configs/:provider',
    {
      config: { scope: 'credentials:admin' },
      schema: {
        tags,
        summary: 'Enable or disable a config',
        description: 'A disabled config turns the provider off for the organization (new connections and refreshes through it).',
        params: ProviderParams,
        body: z.object({ enabled: z.boolean() }).strict(),
        response: { 200: envelope(OAuthConfigView), ...errorResponses },
      },
    },
    async (req) => ok(req, await setConfigEnabled(req.ctx, req.params.provider, req.body.enabled)),
  );

  app.delete(
    '/v1/oauth/configs/:provider',
    {
      config: { scope: 'credentials:admin' },
      schema: { tags, summary: 'Delete a config', params: ProviderParams, response: { 204: z.null(), ...errorResponses } },
    },
    async (req, reply) => {
      await deleteConfig(req.ctx, req.params.provider);
      return reply.status(204).send(null);
    },
  );
}
