import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { envelope, errorResponses, ok, page, pageEnvelope } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import type { ActivityRegistry } from '../activity/index.js';
import {
  CreateDeploymentBody,
  Delivery,
  DeliveryParams,
  Deployment,
  DeploymentParams,
  Invocation,
  InvocationParams,
  InvokeBody,
  PageQuery,
  UpdateDeploymentBody,
  WEBHOOK_EVENTS,
} from './schemas.js';
import {
  canSeeDeployment,
  createDeployment,
  deleteDeployment,
  getDelivery,
  getDeployment,
  getInvocation,
  invokeDeployment,
  listDeliveries,
  listDeployments,
  listInvocations,
  redeliver,
  rotateWebhookSecret,
  updateDeployment,
} from './service.js';

const tags = ['deployments'];
const Deleted = z.object({ deleted: z.literal(true) });

/** Activity filters on `deployment` resources: a deployment of the caller's organization. */
export function registerDeploymentActivity(registry: ActivityRegistry): void {
  registry.resource('deployment', canSeeDeployment);
}

const originOf = (req: { protocol: string; host: string }) => `${req.protocol}://${req.host}`;

export async function deploymentRoutes(app: App, _deps: Deps) {
  app.post(
    '/v1/deployments',
    {
      config: { scope: 'deployments:write' },
      schema: {
        tags,
        summary: 'Deploy an agent',
        description: [
          '`runtimeSlug` names the agent, `apiSlug` the deployment (unique in the organization: 409 `conflict`), `templateSlug` the sandbox ',
          `template of its in_sandbox runs. \`webhookUrl\` receives signed events (Standard Webhooks) of \`webhookEvents\` (${WEBHOOK_EVENTS.join(', ')}; `,
          'default run.completed, run.failed, run.timed_out). `maxConcurrent` invocations run at once (1 to 100, default 1); each may take `timeout` ',
          'seconds (1 to 3600, default 300). The answer holds `webhookSecret`, shown only here and on rotation.',
        ].join(''),
        body: CreateDeploymentBody,
        response: { 201: envelope(Deployment), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await createDeployment(req.ctx, req.body, originOf(req)))),
  );

  app.get(
    '/v1/deployments',
    {
      config: { scope: 'deployments:read' },
      schema: { tags, summary: 'List deployments', response: { 200: envelope(z.array(Deployment)), ...errorResponses } },
    },
    async (req) => ok(req, await listDeployments(req.ctx, originOf(req))),
  );

  app.get(
    '/v1/deployments/:deploymentId',
    {
      config: { scope: 'deployments:read' },
      schema: {
        tags,
        summary: 'Get a deployment (by id or apiSlug)',
        params: DeploymentParams,
        response: { 200: envelope(Deployment), ...errorResponses },
      },
    },
    async (req) => ok(req, await getDeployment(req.ctx, req.params.deploymentId, originOf(req))),
  );

  app.patch(
    '/v1/deployments/:deploymentId',
    {
      config: { scope: 'deployments:write' },
      schema: {
        tags,
        summary: 'Change a deployment',
        description: 'A `webhookUrl` (even the same) re-enables a webhook disabled by a 410; `null` stops the webhook.',
        params: DeploymentParams,
        body: UpdateDeploymentBody,
        response: { 200: envelope(Deployment), ...errorResponses },
      },
    },
    async (req) => ok(req, await updateDeployment(req.ctx, req.params.deploymentId, req.body, originOf(req))),
  );

  app.delete(
    '/v1/deployments/:deploymentId',
    {
      config: { scope: 'deployments:write' },
      schema: { tags, summary: 'Delete a deployment', params: DeploymentParams, response: { 200: envelope(Deleted), ...errorResponses } },
    },
    async (req) => {
      await deleteDeployment(req.ctx, req.params.deploymentId);
      return ok(req, { deleted: true as const });
    },
  );

  app.post(
    '/v1/deployments/:deploymentId/invoke',
    {
      config: { scope: 'deployments:invoke' },
      schema: {
        tags,
        summary: 'Invoke a deployment',
        description: [
          '`input` is the prompt (an object is sent as its JSON text). The invocation is queued and runs as you when one of the deployment’s ',
          '`maxConcurrent` slots is free: 202 with the invocation. With `wait: true`, answers 200 at its end (up to the deployment’s timeout) with its ',
          'run’s `result` and `usage`. Too many invocations waiting: 429 `rate_limited`. Past `timeout` seconds the run is cancelled and the ',
          'invocation ends `timed_out`.',
        ].join(''),
        params: DeploymentParams,
        body: InvokeBody,
        response: { 200: envelope(Invocation), 202: envelope(Invocation), ...errorResponses },
      },
    },
    async (req, reply) => {
      const r = await invokeDeployment(req.ctx, req.params.deploymentId, req.body);
      return reply.status(r.ended ? 200 : 202).send(ok(req, r.invocation));
    },
  );

  app.get(
    '/v1/deployments/:deploymentId/invocations',
    {
      config: { scope: 'deployments:read' },
      schema: {
        tags,
        summary: 'Invocations of a deployment',
        description: 'Newest first.',
        params: DeploymentParams,
        querystring: PageQuery,
        response: { 200: pageEnvelope(z.array(Invocation)), ...errorResponses },
      },
    },
    async (req) => {
      const p = await listInvocations(req.ctx, req.params.deploymentId, req.query);
      return page(req, p.items, p);
    },
  );

  app.get(
    '/v1/deployments/:deploymentId/invocations/:invocationId',
    {
      config: { scope: 'deployments:read' },
      schema: { tags, summary: 'An invocation', params: InvocationParams, response: { 200: envelope(Invocation), ...errorResponses } },
    },
    async (req) => ok(req, await getInvocation(req.ctx, req.params.deploymentId, req.params.invocationId)),
  );

  app.post(
    '/v1/deployments/:deploymentId/webhook-secret/rotate',
    {
      config: { scope: 'deployments:write' },
      schema: {
        tags,
        summary: 'Rotate the webhook signing secret',
        description:
          'Answers the deployment with its new `webhookSecret` (shown only here). For HANGAR_WEBHOOKS_SECRET_OVERLAP_SECONDS, deliveries carry a signature with the previous secret too.',
        params: DeploymentParams,
        response: { 200: envelope(Deployment), ...errorResponses },
      },
    },
    async (req) => ok(req, await rotateWebhookSecret(req.ctx, req.params.deploymentId, originOf(req))),
  );

  app.get(
    '/v1/deployments/:deploymentId/deliveries',
    {
      config: { scope: 'deployments:read' },
      schema: {
        tags,
        summary: 'Webhook deliveries of a deployment',
        description: 'Newest first, with their status (pending, delivered, failed, disabled) and attempts.',
        params: DeploymentParams,
        querystring: PageQuery,
        response: { 200: pageEnvelope(z.array(Delivery)), ...errorResponses },
      },
    },
    async (req) => {
      const p = await listDeliveries(req.ctx, req.params.deploymentId, req.query);
      return page(req, p.items, p);
    },
  );

  app.get(
    '/v1/deployments/:deploymentId/deliveries/:deliveryId',
    {
      config: { scope: 'deployments:read' },
      schema: {
        tags,
        summary: 'A webhook delivery with its attempts',
        params: DeliveryParams,
        response: { 200: envelope(Delivery), ...errorResponses },
      },
    },
    async (req) => ok(req, await getDelivery(req.ctx, req.params.deploymentId, req.params.deliveryId)),
  );

  app.post(
    '/v1/deployments/:deploymentId/deliveries/:deliveryId/redeliver',
    {
      config: { scope: 'deployments:write' },
      schema: {
        tags,
        summary: 'Send a delivery again',
        description:
          'One more attempt of the same delivery: the same `webhook-id` and payload, a fresh timestamp and signature. A delivery still being attempted is 409.',
        params: DeliveryParams,
        response: { 200: envelope(Delivery), ...errorResponses },
      },
    },
    async (req) => ok(req, await redeliver(req.ctx, req.params.deploymentId, req.params.deliveryId)),
  );
}
