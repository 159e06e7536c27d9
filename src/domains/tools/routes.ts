import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { envelope, errorResponses, ok, page, pageEnvelope } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import { catalog } from './catalog.js';
import {
  CreateCustomBody,
  CustomToolView,
  createCustomTool,
  deleteCustomTool,
  getCustomTool,
  listCustomTools,
  PatchCustomBody,
  refreshCustomTool,
  updateCustomTool,
} from './custom.js';
import { executeTool } from './execute.js';
import {
  CredentialsBody,
  CredentialStatus,
  ExecuteBody,
  Install,
  InstallBody,
  InstalledTool,
  ListToolsQuery,
  ScopeQuery,
  SlugParams,
  ToolExecution,
  ToolView,
} from './schemas.js';
import {
  deleteToolCredentials,
  getTool,
  getToolCredentials,
  installTool,
  listInstalled,
  listTools,
  putToolCredentials,
  uninstallTool,
} from './service.js';

const tags = ['tools'];
const IdParams = z.object({ id: z.string().min(1).max(100) });

export async function toolRoutes(app: App, deps: Deps) {
  catalog(deps); // a bad catalogue file stops start-up with a ConfigError naming it

  app.get(
    '/v1/tools',
    {
      config: { scope: 'tools:read' },
      schema: {
        tags,
        summary: 'Tool catalogue',
        description:
          'The shipped tools, the operator’s catalogue file (`HANGAR_TOOLS_CATALOG_FILE`) and the organization’s custom tools, ordered by slug. `q` matches words in the slug, name and description.',
        querystring: ListToolsQuery,
        response: { 200: pageEnvelope(z.array(ToolView)), ...errorResponses },
      },
    },
    async (req) => {
      const p = await listTools(req.ctx, req.query);
      return page(req, p.items, p);
    },
  );

  app.get(
    '/v1/tools/installed',
    {
      config: { scope: 'tools:read' },
      schema: {
        tags,
        summary: 'Installed tools',
        description: 'Your own installs and the organization’s, each with its tool.',
        response: { 200: envelope(z.array(InstalledTool)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listInstalled(req.ctx)),
  );

  app.get(
    '/v1/tools/:slug',
    {
      config: { scope: 'tools:read' },
      schema: { tags, summary: 'One tool', params: SlugParams, response: { 200: envelope(ToolView), ...errorResponses } },
    },
    async (req) => ok(req, await getTool(req.ctx, req.params.slug)),
  );

  app.post(
    '/v1/tools/:slug/install',
    {
      config: { scope: 'tools:write' },
      schema: {
        tags,
        summary: 'Install a tool',
        description:
          'For yourself (default), or with `scope: "organization"` for every member (needs `tools:admin`). Installing again answers 200 with the existing install.',
        params: SlugParams,
        body: InstallBody,
        response: { 200: envelope(Install), 201: envelope(Install), ...errorResponses },
      },
    },
    async (req, reply) => {
      const { install, created } = await installTool(req.ctx, req.params.slug, req.body.scope);
      return reply.code(created ? 201 : 200).send(ok(req, install));
    },
  );

  app.delete(
    '/v1/tools/:slug/install',
    {
      config: { scope: 'tools:write' },
      schema: { tags, summary: 'Uninstall a tool', params: SlugParams, querystring: ScopeQuery, response: { 204: z.null(), ...errorResponses } },
    },
    async (req, reply) => {
      await uninstallTool(req.ctx, req.params.slug, req.query.scope);
      return reply.code(204).send(null);
    },
  );

  app.post(
    '/v1/tools/:slug/credentials',
    {
      config: { scope: 'tools:write' },
      schema: {
        tags,
        summary: 'Store credentials of a tool',
        description:
          'A JSON object of the tool’s credential fields (`{ "apiKey": "..." }`), merged into what is stored. Unknown fields are a 400. Values are encrypted and never returned. `?scope=organization` stores them for every member (needs `credentials:admin`).',
        params: SlugParams,
        querystring: ScopeQuery,
        body: CredentialsBody,
        response: { 200: envelope(CredentialStatus), ...errorResponses },
      },
    },
    async (req) => ok(req, await putToolCredentials(req.ctx, req.params.slug, req.query.scope, req.body)),
  );

  app.get(
    '/v1/tools/:slug/credentials',
    {
      config: { scope: 'tools:read' },
      schema: {
        tags,
        summary: 'Which credentials of a tool are stored',
        description: 'Field names only, never values, and the required fields stored at neither your scope nor the organization’s.',
        params: SlugParams,
        querystring: ScopeQuery,
        response: { 200: envelope(CredentialStatus), ...errorResponses },
      },
    },
    async (req) => ok(req, await getToolCredentials(req.ctx, req.params.slug, req.query.scope)),
  );

  app.delete(
    '/v1/tools/:slug/credentials',
    {
      config: { scope: 'tools:write' },
      schema: {
        tags,
        summary: 'Delete stored credentials of a tool',
        params: SlugParams,
        querystring: ScopeQuery,
        response: { 204: z.null(), ...errorResponses },
      },
    },
    async (req, reply) => {
      await deleteToolCredentials(req.ctx, req.params.slug, req.query.scope);
      return reply.code(204).send(null);
    },
  );

  app.post(
    '/v1/tools/:slug/execute',
    {
      config: { scope: 'tools:execute' },
      schema: {
        tags,
        summary: 'Execute a tool on the server',
        description: [
          'Runs an installed tool with `arguments` (checked against its input schema: 400 when they do not match).',
          'Missing credential fields are filled in this order, each step only for fields still missing: (1) `credentials`, (2) `credentialOverrides` (field -> secret name), (3) the stored credentials of the tool (yours, then the organization’s), (4) your or the organization’s secret named after the field (`apiKey` -> `APIKEY`), (5) your connected account of the tool’s OAuth provider (the default one, or `oauth.account`).',
          'A tool failure is 200 with `status: "failed"` and an `error` (`credentials_missing` names the fields and, for OAuth, where to connect). `credentialSources` says which step supplied each field; no value is ever returned.',
        ].join('\n\n'),
        params: SlugParams,
        body: ExecuteBody,
        response: { 200: envelope(ToolExecution), ...errorResponses },
      },
    },
    async (req) => ok(req, await executeTool(req.ctx, req.params.slug, req.body, { via: 'api' })),
  );

  // ---- custom tools ----

  app.post(
    '/v1/tools/custom',
    {
      config: { scope: 'tools:admin' },
      // An OpenAPI document may be up to 1 MiB of text, more than the default body limit allows.
      bodyLimit: 2 * 1024 * 1024,
      schema: {
        tags,
        summary: 'Create a custom tool, an OpenAPI tool set or an MCP server',
        description: [
          '`kind: "http"`: one tool from `tool` (`inputSchema`, `credentials`, `oauth`, `execution` as in the catalogue format: URL, header, query and body templates over `{{args.x}}` and `{{credentials.y}}`, a literal host).',
          '`kind: "openapi"`: one tool per operation of `document` (OpenAPI 3.0/3.1, JSON or YAML), named `<slug>__<operation>`; what cannot be expressed is listed in `skipped`.',
          '`kind: "mcp"`: a remote MCP server (streamable HTTP) whose tools become `<slug>__<tool>`; `headers` are templates filled by the credential chain (store the values with POST /v1/tools/{slug}/credentials).',
          'Its tools are installed for the whole organization. Admins only (`tools:admin`).',
        ].join('\n\n'),
        body: CreateCustomBody,
        response: { 201: envelope(CustomToolView), ...errorResponses },
      },
    },
    async (req, reply) => reply.code(201).send(ok(req, await createCustomTool(req.ctx, req.body))),
  );

  app.get(
    '/v1/tools/custom',
    {
      config: { scope: 'tools:read' },
      schema: { tags, summary: 'Custom tools of the organization', response: { 200: envelope(z.array(CustomToolView)), ...errorResponses } },
    },
    async (req) => ok(req, await listCustomTools(req.ctx)),
  );

  app.get(
    '/v1/tools/custom/:id',
    {
      config: { scope: 'tools:read' },
      schema: { tags, summary: 'One custom tool', params: IdParams, response: { 200: envelope(CustomToolView), ...errorResponses } },
    },
    async (req) => ok(req, await getCustomTool(req.ctx, req.params.id)),
  );

  app.patch(
    '/v1/tools/custom/:id',
    {
      config: { scope: 'tools:admin' },
      bodyLimit: 2 * 1024 * 1024,
      schema: {
        tags,
        summary: 'Change a custom tool',
        description:
          'Fields of its kind only. Tools that disappear lose their installs and stored credentials; new ones are installed for the organization.',
        params: IdParams,
        body: PatchCustomBody,
        response: { 200: envelope(CustomToolView), ...errorResponses },
      },
    },
    async (req) => ok(req, await updateCustomTool(req.ctx, req.params.id, req.body)),
  );

  app.delete(
    '/v1/tools/custom/:id',
    {
      config: { scope: 'tools:admin' },
      schema: { tags, summary: 'Delete a custom tool', params: IdParams, response: { 204: z.null(), ...errorResponses } },
    },
    async (req, reply) => {
      await deleteCustomTool(req.ctx, req.params.id);
      return reply.code(204).send(null);
    },
  );

  app.post(
    '/v1/tools/custom/:id/refresh',
    {
      config: { scope: 'tools:admin' },
      schema: {
        tags,
        summary: 'List an MCP server’s tools again now',
        description: 'A server that fails keeps its last list; `lastError` says why.',
        params: IdParams,
        response: { 200: envelope(CustomToolView), ...errorResponses },
      },
    },
    async (req) => ok(req, await refreshCustomTool(req.ctx, req.params.id)),
  );
}
