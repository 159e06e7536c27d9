import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { envelope, errorResponses, ok, page } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import { ActivityPage, ActivityQuery, type ActivityRegistry } from '../activity/index.js';
import { Agent, AgentParams, CreateAgentBody, PatchAgentBody } from './schemas.js';
import { canSeeAgent, createAgent, deleteAgent, getAgent, listAgentActivity, listAgents, updateAgent } from './service.js';

/** The agents domain's activity check (buildApp registers it). */
export function registerAgentActivity(registry: ActivityRegistry): void {
  registry.resource('agent', canSeeAgent);
}

const tags = ['agents'];

export async function agentRoutes(app: App, _deps: Deps) {
  app.post(
    '/v1/agents',
    {
      config: { scope: 'agent:write' },
      schema: {
        tags,
        summary: 'Create an agent',
        description: [
          '`slug` (unique in the organization), `executionMode` (`managed` default: the model gateway only; `in_sandbox`: tools run in a sandbox of `sandboxTemplate`; ',
          '`local-desktop`: runs on the device `targetDeviceId`, required for that mode), `model`, `instructions`, `tools` (exec_command, write_stdin, apply_patch, view_image need in_sandbox; any other name is a tool slug from GET /v1/tools, which runs server-side once installed), ',
          '`config` (`maxTurns`, `maxTokens`, `temperature`: defaults of its runs), `metadata`.',
        ].join(''),
        body: CreateAgentBody,
        response: { 201: envelope(Agent), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await createAgent(req.ctx, req.body))),
  );

  app.get(
    '/v1/agents',
    {
      config: { scope: 'agent:read' },
      schema: {
        tags,
        summary: 'List agents',
        description: 'The organization’s agents, by slug.',
        response: { 200: envelope(z.array(Agent)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listAgents(req.ctx)),
  );

  app.get(
    '/v1/agents/:slug',
    {
      config: { scope: 'agent:read' },
      schema: { tags, summary: 'Get an agent', params: AgentParams, response: { 200: envelope(Agent), ...errorResponses } },
    },
    async (req) => ok(req, await getAgent(req.ctx, req.params.slug)),
  );

  app.patch(
    '/v1/agents/:slug',
    {
      config: { scope: 'agent:write' },
      schema: {
        tags,
        summary: 'Change an agent',
        description: 'Fields given replace the current ones (null clears a nullable field); the whole definition is validated again.',
        params: AgentParams,
        body: PatchAgentBody,
        response: { 200: envelope(Agent), ...errorResponses },
      },
    },
    async (req) => ok(req, await updateAgent(req.ctx, req.params.slug, req.body)),
  );

  app.delete(
    '/v1/agents/:slug',
    {
      config: { scope: 'agent:write' },
      schema: { tags, summary: 'Delete an agent', params: AgentParams, response: { 204: z.null(), ...errorResponses } },
    },
    async (req, reply) => {
      await deleteAgent(req.ctx, req.params.slug);
      return reply.status(204).send(null);
    },
  );

  app.get(
    '/v1/agents/:slug/activity',
    {
      config: { scope: 'activity:read' },
      schema: {
        tags,
        summary: 'Activity of an agent',
        description: 'Its events (agent.created, .updated, .deleted, and its runs’); accepts the query of GET /v1/activity.',
        params: AgentParams,
        querystring: ActivityQuery.omit({ resource_type: true, resource_id: true }),
        response: { 200: ActivityPage, ...errorResponses },
      },
    },
    async (req) => {
      const result = await listAgentActivity(req.ctx, req.params.slug, req.query);
      return page(req, { events: result.events }, result);
    },
  );
}
