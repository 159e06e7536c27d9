import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { envelope, errorResponses, ok } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import type { ActivityRegistry } from '../activity/index.js';
import { admitInvocation, invokeTrigger, recordTooLarge } from './invoke.js';
import type { TriggerRow } from './repo.js';
import { CreateTriggerBody, InvokeResult, Trigger, TriggerList, TriggerParams, TriggersQuery, UpdateTriggerBody } from './schemas.js';
import { canSeeTrigger, createTrigger, deleteTrigger, getTrigger, listTriggers, pauseTrigger, resumeTrigger, updateTrigger } from './service.js';

const tags = ['triggers'];
const Deleted = z.object({ deleted: z.literal(true) });

export function registerTriggerActivity(registry: ActivityRegistry): void {
  registry.resource('trigger', canSeeTrigger);
}

const originOf = (req: { protocol: string; host: string }) => `${req.protocol}://${req.host}`;

export async function triggerRoutes(app: App, deps: Deps) {
  app.post(
    '/v1/triggers',
    {
      config: { scope: 'triggers:write' },
      schema: {
        tags,
        summary: 'Create a trigger',
        description: [
          'Binds an inbound webhook to a deployment (`deployment`: its id or apiSlug; unknown 404). `source` says how requests are signed: ',
          '`webhook` (`X-Webhook-Signature` = hex HMAC-SHA256 of the raw body, or the Standard Webhooks headers), `code_host`, `payment_provider`, ',
          '`chat_workspace` (each its provider’s own signature headers). `events` filters by the source’s event type (empty: all); `message` is ',
          'the prompt template; `allowedIps` restricts callers (IPs or CIDRs); `repo` (code_host only) the repository. The `secret` is answered ',
          'here only (generated when omitted).',
        ].join(''),
        body: CreateTriggerBody,
        response: { 201: envelope(Trigger), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await createTrigger(req.ctx, req.body, originOf(req)))),
  );

  app.get(
    '/v1/triggers',
    {
      config: { scope: 'triggers:read' },
      schema: {
        tags,
        summary: 'List triggers',
        description: 'Oldest first; `deployment` (id or apiSlug) narrows to one deployment’s.',
        querystring: TriggersQuery,
        response: { 200: envelope(TriggerList), ...errorResponses },
      },
    },
    async (req) => ok(req, { triggers: await listTriggers(req.ctx, req.query, originOf(req)) }),
  );

  app.get(
    '/v1/triggers/:triggerId',
    {
      config: { scope: 'triggers:read' },
      schema: { tags, summary: 'Get a trigger', params: TriggerParams, response: { 200: envelope(Trigger), ...errorResponses } },
    },
    async (req) => ok(req, await getTrigger(req.ctx, req.params.triggerId, originOf(req))),
  );

  app.patch(
    '/v1/triggers/:triggerId',
    {
      config: { scope: 'triggers:write' },
      schema: {
        tags,
        summary: 'Change a trigger',
        description: 'Any of `deployment`, `events`, `message`, `allowedIps`, `repo` (code_host only), `secret` (stored, never answered).',
        params: TriggerParams,
        body: UpdateTriggerBody,
        response: { 200: envelope(Trigger), ...errorResponses },
      },
    },
    async (req) => ok(req, await updateTrigger(req.ctx, req.params.triggerId, req.body, originOf(req))),
  );

  app.delete(
    '/v1/triggers/:triggerId',
    {
      config: { scope: 'triggers:write' },
      schema: { tags, summary: 'Delete a trigger', params: TriggerParams, response: { 200: envelope(Deleted), ...errorResponses } },
    },
    async (req) => {
      await deleteTrigger(req.ctx, req.params.triggerId);
      return ok(req, { deleted: true as const });
    },
  );

  for (const action of ['pause', 'resume'] as const) {
    app.post(
      `/v1/triggers/:triggerId/${action}`,
      {
        config: { scope: 'triggers:write' },
        schema: {
          tags,
          summary: action === 'pause' ? 'Pause a trigger' : 'Resume a trigger',
          description:
            action === 'pause'
              ? 'active → paused: its invoke URL answers 409 `invalid_state` until resumed. Already paused 409 `invalid_state`.'
              : 'paused → active. Already active 409 `invalid_state`.',
          params: TriggerParams,
          response: { 200: envelope(Trigger), ...errorResponses },
        },
      },
      async (req) => ok(req, await (action === 'pause' ? pauseTrigger : resumeTrigger)(req.ctx, req.params.triggerId, originOf(req))),
    );
  }

  // Sources sign the exact bytes they send: this route takes any body raw, up to HANGAR_TRIGGERS_MAX_BODY_BYTES.
  await app.register(async (scoped: App) => {
    const admitted = new WeakMap<object, TriggerRow>();
    scoped.removeAllContentTypeParsers();
    scoped.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
    scoped.post(
      '/v1/triggers/:triggerId/invoke',
      {
        config: { auth: 'none' },
        bodyLimit: deps.config.deployments.triggerMaxBodyBytes,
        // Before the body is read: the trigger exists, is active, and the caller's address is allowed.
        onRequest: async (req) => {
          const { triggerId } = req.params as { triggerId: string };
          admitted.set(
            req,
            await admitInvocation(deps, triggerId, { socketIp: req.socket.remoteAddress, forwardedFor: req.headers['x-forwarded-for'] }),
          );
        },
        onError: async (req, _reply, err) => {
          if ((err as { statusCode?: number }).statusCode === 413 || (err as { code?: string }).code === 'FST_ERR_CTP_BODY_TOO_LARGE')
            await recordTooLarge(deps, (req.params as { triggerId: string }).triggerId);
        },
        schema: {
          tags,
          summary: 'Fire a trigger (called by the source)',
          description: [
            'No credential: the signature is. Checked in this order: paused 409 `invalid_state`; `allowedIps` 403 (the socket address, or behind a ',
            'proxy in HANGAR_TRIGGERS_TRUSTED_PROXIES the right-most X-Forwarded-For address that is not one); the signature over the raw body 401 ',
            '(`webhook`: `X-Webhook-Signature: [sha256=]<hex HMAC-SHA256>`, or Standard Webhooks `webhook-id`/`webhook-timestamp`/`webhook-signature`; ',
            'native sources: their provider’s headers; timestamps within HANGAR_TRIGGERS_TOLERANCE_SECONDS); a delivery id seen before 409 `replayed`; ',
            'a body over HANGAR_TRIGGERS_MAX_BODY_BYTES 413. An event the trigger does not subscribe to answers 200 `{ fired: false, reason }`; ',
            'a code-host `ping` 200 without firing; a chat-workspace `url_verification` answers `{ challenge }`. Otherwise the deployment is invoked ',
            'with the rendered `message`: 202 `{ fired: true, invocationId, status }`.',
          ].join(''),
          security: [],
          params: TriggerParams,
          response: {
            200: z.union([envelope(InvokeResult), z.object({ challenge: z.string() })]),
            202: envelope(InvokeResult),
            ...errorResponses,
          },
        },
      },
      async (req, reply) => {
        const row = admitted.get(req)!;
        // The body as received (the app's depth check does not walk raw bodies): the signature covers these bytes.
        const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
        const r = await invokeTrigger(deps, row, req.headers, raw);
        if ('challenge' in r) return reply.status(200).send({ challenge: r.challenge });
        return reply.status(r.status).send(ok(req, r.data));
      },
    );
  });
}
