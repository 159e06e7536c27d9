import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { envelope, errorResponses, ok, page, pageEnvelope } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import type { ActivityRegistry } from '../activity/index.js';
import type { TriggerRow } from './repo.js';
import {
  CreateWorkflowBody,
  CreateWorkflowTriggerBody,
  RunParams,
  RunsQuery,
  StartRunBody,
  TriggerParams,
  UpdateWorkflowBody,
  UpdateWorkflowTriggerBody,
  VersionParams,
  WebhookParams,
  WebhookResult,
  Workflow,
  WorkflowList,
  WorkflowParams,
  WorkflowRun,
  WorkflowRunList,
  WorkflowTrigger,
  WorkflowTriggerList,
  WorkflowVersion,
} from './schemas.js';
import {
  canSeeWorkflow,
  cancelWorkflowRun,
  createWorkflow,
  deleteWorkflow,
  getVersion,
  getWorkflow,
  getWorkflowRun,
  listWorkflowRuns,
  listWorkflows,
  startWorkflowRun,
  updateWorkflow,
} from './service.js';
import {
  admitWebhook,
  createWorkflowTrigger,
  deleteWorkflowTrigger,
  fireWebhook,
  getWorkflowTrigger,
  listWorkflowTriggers,
  recordWebhookTooLarge,
  unscheduleTriggers,
  updateWorkflowTrigger,
} from './triggers.js';

const tags = ['workflows'];
const Deleted = z.object({ deleted: z.literal(true) });
const originOf = (req: { protocol: string; host: string }) => `${req.protocol}://${req.host}`;

export function registerWorkflowActivity(registry: ActivityRegistry): void {
  registry.resource('workflow', canSeeWorkflow);
}

export async function workflowRoutes(app: App, deps: Deps) {
  app.post(
    '/v1/workflows',
    {
      config: { scope: 'workflows:write' },
      schema: {
        tags,
        summary: 'Create a workflow',
        description: [
          'Version 1 of a named list of steps, run in order. Each step has a unique `name`, a `type` — `agent` (`agent`, `prompt`), `tool` ',
          '(`tool`, `arguments`), `code` (`language`, `code`, `stdin`), `http` (`method`, `url`, `headers`, `body`) — `retries` (default 2) ',
          'and `timeoutSeconds` (default 300). Strings in a step’s input are templates: `{{input.a.b}}` reads the run’s input, ',
          '`{{steps.<name>.output.x}}` an earlier step’s output; a missing path renders empty (a string that is one placeholder becomes ',
          'the value itself). A slug taken is 409.',
        ].join(''),
        body: CreateWorkflowBody,
        response: { 201: envelope(Workflow), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await createWorkflow(req.ctx, req.body))),
  );

  app.get(
    '/v1/workflows',
    {
      config: { scope: 'workflows:read' },
      schema: { tags, summary: 'List workflows', response: { 200: envelope(WorkflowList), ...errorResponses } },
    },
    async (req) => ok(req, { workflows: await listWorkflows(req.ctx) }),
  );

  app.get(
    '/v1/workflows/:workflowSlug',
    {
      config: { scope: 'workflows:read' },
      schema: {
        tags,
        summary: 'Get a workflow (its current version’s steps)',
        params: WorkflowParams,
        response: { 200: envelope(Workflow), ...errorResponses },
      },
    },
    async (req) => ok(req, await getWorkflow(req.ctx, req.params.workflowSlug)),
  );

  app.patch(
    '/v1/workflows/:workflowSlug',
    {
      config: { scope: 'workflows:write' },
      schema: {
        tags,
        summary: 'Change a workflow',
        description: '`name`, `description`; new `steps` make the next version (runs already started keep the version they started with).',
        params: WorkflowParams,
        body: UpdateWorkflowBody,
        response: { 200: envelope(Workflow), ...errorResponses },
      },
    },
    async (req) => ok(req, await updateWorkflow(req.ctx, req.params.workflowSlug, req.body)),
  );

  app.delete(
    '/v1/workflows/:workflowSlug',
    {
      config: { scope: 'workflows:write' },
      schema: {
        tags,
        summary: 'Delete a workflow',
        description: 'With its versions, runs and triggers; its webhook URLs then answer 404 and its schedules stop.',
        params: WorkflowParams,
        response: { 200: envelope(Deleted), ...errorResponses },
      },
    },
    async (req) => {
      await deleteWorkflow(req.ctx, req.params.workflowSlug, (ids) => unscheduleTriggers(deps, ids));
      return ok(req, { deleted: true as const });
    },
  );

  app.get(
    '/v1/workflows/:workflowSlug/versions/:version',
    {
      config: { scope: 'workflows:read' },
      schema: {
        tags,
        summary: 'Get one version of a workflow',
        params: VersionParams,
        response: { 200: envelope(WorkflowVersion), ...errorResponses },
      },
    },
    async (req) => ok(req, await getVersion(req.ctx, req.params.workflowSlug, req.params.version)),
  );

  app.post(
    '/v1/workflows/:workflowSlug/runs',
    {
      config: { scope: 'workflows:run' },
      schema: {
        tags,
        summary: 'Start a workflow run',
        description:
          'Runs the current version with `input` as you (each step needs your scope for it: `agent:run`, `tools:execute`, `execute:run`). 202 with the run, queued; poll it for each step’s status and output.',
        params: WorkflowParams,
        body: StartRunBody,
        response: { 202: envelope(WorkflowRun), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(202).send(ok(req, await startWorkflowRun(req.ctx, req.params.workflowSlug, req.body))),
  );

  app.get(
    '/v1/workflows/:workflowSlug/runs',
    {
      config: { scope: 'workflows:read' },
      schema: {
        tags,
        summary: 'List a workflow’s runs',
        description: 'Newest first; `status` narrows; paged by `limit` and `cursor`.',
        params: WorkflowParams,
        querystring: RunsQuery,
        response: { 200: pageEnvelope(WorkflowRunList), ...errorResponses },
      },
    },
    async (req) => {
      const r = await listWorkflowRuns(req.ctx, req.params.workflowSlug, req.query);
      return page(req, { runs: r.runs }, r);
    },
  );

  app.get(
    '/v1/workflows/:workflowSlug/runs/:runId',
    {
      config: { scope: 'workflows:read' },
      schema: { tags, summary: 'Get a workflow run with its steps', params: RunParams, response: { 200: envelope(WorkflowRun), ...errorResponses } },
    },
    async (req) => ok(req, await getWorkflowRun(req.ctx, req.params.workflowSlug, req.params.runId)),
  );

  app.post(
    '/v1/workflows/:workflowSlug/runs/:runId/cancel',
    {
      config: { scope: 'workflows:run' },
      schema: {
        tags,
        summary: 'Cancel a workflow run',
        description:
          'A queued or running run ends `cancelled`; steps not started are `skipped`; a step running finishes, and nothing after it starts. An ended run 409.',
        params: RunParams,
        response: { 200: envelope(WorkflowRun), ...errorResponses },
      },
    },
    async (req) => ok(req, await cancelWorkflowRun(req.ctx, req.params.workflowSlug, req.params.runId)),
  );

  app.post(
    '/v1/workflows/:workflowSlug/triggers',
    {
      config: { scope: 'workflows:write' },
      schema: {
        tags,
        summary: 'Create a workflow trigger',
        description: [
          '`type` `webhook`: answers `webhookUrl` and `secret` (generated when omitted; answered only here); callers POST JSON there with ',
          '`X-Webhook-Secret`. `type` `cron`: `schedule` (five fields, or six with seconds) in `timezone` (IANA, default UTC) starts a run ',
          'each tick with `input` (default `{ trigger, scheduledAt }`); a bad schedule or time zone is 400. Runs run as the trigger’s creator ',
          '(it needs `workflows:run` too).',
        ].join(''),
        params: WorkflowParams,
        body: CreateWorkflowTriggerBody,
        response: { 201: envelope(WorkflowTrigger), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await createWorkflowTrigger(req.ctx, req.params.workflowSlug, req.body, originOf(req)))),
  );

  app.get(
    '/v1/workflows/:workflowSlug/triggers',
    {
      config: { scope: 'workflows:read' },
      schema: {
        tags,
        summary: 'List a workflow’s triggers',
        params: WorkflowParams,
        response: { 200: envelope(WorkflowTriggerList), ...errorResponses },
      },
    },
    async (req) => ok(req, { triggers: await listWorkflowTriggers(req.ctx, req.params.workflowSlug, originOf(req)) }),
  );

  app.get(
    '/v1/workflows/:workflowSlug/triggers/:triggerId',
    {
      config: { scope: 'workflows:read' },
      schema: { tags, summary: 'Get a workflow trigger', params: TriggerParams, response: { 200: envelope(WorkflowTrigger), ...errorResponses } },
    },
    async (req) => ok(req, await getWorkflowTrigger(req.ctx, req.params.workflowSlug, req.params.triggerId, originOf(req))),
  );

  app.patch(
    '/v1/workflows/:workflowSlug/triggers/:triggerId',
    {
      config: { scope: 'workflows:write' },
      schema: {
        tags,
        summary: 'Change a workflow trigger',
        description:
          '`name`, `enabled` (a disabled webhook answers 409; a disabled schedule does not fire), `secret` (webhook; never answered), `schedule` and `timezone` (cron).',
        params: TriggerParams,
        body: UpdateWorkflowTriggerBody,
        response: { 200: envelope(WorkflowTrigger), ...errorResponses },
      },
    },
    async (req) => ok(req, await updateWorkflowTrigger(req.ctx, req.params.workflowSlug, req.params.triggerId, req.body, originOf(req))),
  );

  app.delete(
    '/v1/workflows/:workflowSlug/triggers/:triggerId',
    {
      config: { scope: 'workflows:write' },
      schema: { tags, summary: 'Delete a workflow trigger', params: TriggerParams, response: { 200: envelope(Deleted), ...errorResponses } },
    },
    async (req) => {
      await deleteWorkflowTrigger(req.ctx, req.params.workflowSlug, req.params.triggerId);
      return ok(req, { deleted: true as const });
    },
  );

  // The caller's body is read raw (any content type, up to HANGAR_TRIGGERS_MAX_BODY_BYTES) and parsed as JSON only
  // after the secret was checked.
  await app.register(async (scoped: App) => {
    const admitted = new WeakMap<object, TriggerRow>();
    scoped.removeAllContentTypeParsers();
    scoped.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
    scoped.post(
      '/v1/workflows/webhooks/:webhookSlug',
      {
        config: { auth: 'none' },
        bodyLimit: deps.config.deployments.triggerMaxBodyBytes,
        onRequest: async (req) => {
          admitted.set(req, await admitWebhook(deps, (req.params as { webhookSlug: string }).webhookSlug));
        },
        onError: async (req, _reply, err) => {
          if ((err as { statusCode?: number }).statusCode === 413 || (err as { code?: string }).code === 'FST_ERR_CTP_BODY_TOO_LARGE')
            await recordWebhookTooLarge(deps, (req.params as { webhookSlug: string }).webhookSlug);
        },
        schema: {
          tags,
          summary: 'Start a workflow run from a webhook (called by the sender)',
          description: [
            'No credential: `X-Webhook-Secret` is (compared in constant time). Unknown slug 404; trigger disabled 409 `invalid_state`; secret ',
            'missing or wrong 401; a body over HANGAR_TRIGGERS_MAX_BODY_BYTES 413; a body that is not JSON 400 (an empty one is null). Then the ',
            'workflow runs with the payload as `input`: 202 `{ runId, status }`. With `Idempotency-Key`, a repeat answers the first run (200). ',
            'Refusals are recorded as `workflow.trigger.rejected` activity.',
          ].join(''),
          security: [],
          params: WebhookParams,
          response: { 200: envelope(WebhookResult), 202: envelope(WebhookResult), ...errorResponses },
        },
      },
      async (req, reply) => {
        const t = admitted.get(req)!;
        const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
        const r = await fireWebhook(deps, t, req.headers, raw);
        return reply.status(r.replayed ? 200 : 202).send(ok(req, { runId: r.runId, status: r.status as z.infer<typeof WebhookResult>['status'] }));
      },
    );
  });
}
