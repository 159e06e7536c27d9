import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { envelope, errorResponses, ok, page } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import { ActivityPage, ActivityQuery, type ActivityRegistry } from '../activity/index.js';
import {
  canSeeInstall,
  getInstall,
  getInstallableAgent,
  installAgent,
  listInstallableAgents,
  listInstallActivity,
  listInstalls,
  uninstallAgent,
} from './installable.js';
import {
  Agent,
  AgentParams,
  CreateAgentBody,
  InstallableAgent,
  InstallableAgentInstall,
  InstallableParams,
  InstallBody,
  InstallParams,
  InstallResult,
  PatchAgentBody,
} from './schemas.js';
import { canSeeAgent, createAgent, deleteAgent, getAgent, listAgentActivity, listAgents, updateAgent } from './service.js';

/** The agents domain's activity check (buildApp registers it). */
export function registerAgentActivity(registry: ActivityRegistry): void {
  registry.resource('agent', canSeeAgent);
  registry.resource('installable_agent_install', canSeeInstall);
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

  installableAgentRoutes(app);
}

const installTags = ['installable agents'];

function installableAgentRoutes(app: App) {
  app.get(
    '/v1/installable-agents',
    {
      config: { scope: 'agent:read' },
      schema: {
        tags: installTags,
        summary: 'List installable agents',
        description: 'Ready agent definitions (instructions, tools, config; no model), each tool with whether it can run on this server.',
        response: { 200: envelope(z.array(InstallableAgent)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listInstallableAgents(req.ctx)),
  );

  app.get(
    '/v1/installable-agents/installs',
    {
      config: { scope: 'agent:read' },
      schema: {
        tags: installTags,
        summary: 'List installs of installable agents',
        description: 'Your installs, newest first (organization admins: every member’s).',
        response: { 200: envelope(z.array(InstallableAgentInstall)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listInstalls(req.ctx)),
  );

  app.get(
    '/v1/installable-agents/installs/:installId',
    {
      config: { scope: 'agent:read' },
      schema: {
        tags: installTags,
        summary: 'Get an install of an installable agent',
        params: InstallParams,
        response: { 200: envelope(InstallableAgentInstall), ...errorResponses },
      },
    },
    async (req) => ok(req, await getInstall(req.ctx, req.params.installId)),
  );

  app.delete(
    '/v1/installable-agents/installs/:installId',
    {
      config: { scope: 'agent:write' },
      schema: {
        tags: installTags,
        summary: 'Uninstall an installable agent',
        description: 'Deletes the install and the agent it created; the tools stay installed.',
        params: InstallParams,
        response: { 204: z.null(), ...errorResponses },
      },
    },
    async (req, reply) => {
      await uninstallAgent(req.ctx, req.params.installId);
      return reply.status(204).send(null);
    },
  );

  app.get(
    '/v1/installable-agents/installs/:installId/activity',
    {
      config: { scope: 'activity:read' },
      schema: {
        tags: installTags,
        summary: 'Activity of an install',
        description: 'Its events (installable_agent.installed, .uninstalled); accepts the query of GET /v1/activity.',
        params: InstallParams,
        querystring: ActivityQuery.omit({ installable_agent_install_id: true }),
        response: { 200: ActivityPage, ...errorResponses },
      },
    },
    async (req) => {
      const result = await listInstallActivity(req.ctx, req.params.installId, req.query);
      return page(req, { events: result.events }, result);
    },
  );

  app.get(
    '/v1/installable-agents/:slug',
    {
      config: { scope: 'agent:read' },
      schema: {
        tags: installTags,
        summary: 'Get an installable agent',
        params: InstallableParams,
        response: { 200: envelope(InstallableAgent), ...errorResponses },
      },
    },
    async (req) => ok(req, await getInstallableAgent(req.ctx, req.params.slug)),
  );

  app.post(
    '/v1/installable-agents/:slug/install',
    {
      config: { scope: 'agent:write' },
      schema: {
        tags: installTags,
        summary: 'Install an installable agent',
        description: [
          'In one transaction: creates the agent (`agentSlug`, default the installable agent’s slug; 409 when taken, leaving nothing behind) with `model` ',
          '(default: the first of GET /v1/models/available), and installs each tool it needs for `scope` `user` (default) or `organization` (needs `tools:admin`; installing needs `tools:write`). ',
          'Each tool is reported with what is still missing before it runs: `missingCredentials` (PUT /v1/tools/{slug}/credentials) and, for OAuth-backed tools, `oauthConnected`.',
        ].join(''),
        params: InstallableParams,
        body: InstallBody.nullish(),
        response: { 201: envelope(InstallResult), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await installAgent(req.ctx, req.params.slug, req.body ?? {}))),
  );
}
