import { z } from 'zod';
import { envelope, errorResponses, ok, page, pageEnvelope } from '../../platform/http/envelope.js';
import { limitParam, queryBool } from '../../platform/http/pagination.js';
import type { App } from '../../platform/http/server.js';
import { ApiKey, CreateApiKeyBody, CreatedApiKey, IdParam } from './schemas.js';
import { createApiKey, getApiKey, listApiKeys, revokeApiKey } from './service.js';

const ListQuery = z.object({
  limit: limitParam(50, 200),
  cursor: z.string().min(1).max(500).optional(),
  include_revoked: queryBool.default(false),
});

export async function identityRoutes(app: App) {
  app.post(
    '/v1/api-keys',
    {
      config: { scope: 'api_keys:write' },
      schema: {
        tags: ['api-keys'],
        summary: 'Create an API key',
        description: 'Returns the secret once. The key acts for the caller in the caller’s organization and never holds more scopes than the caller.',
        body: CreateApiKeyBody,
        response: { 201: envelope(CreatedApiKey), ...errorResponses },
      },
    },
    async (req, reply) => reply.status(201).send(ok(req, await createApiKey(req.ctx, req.body))),
  );

  app.get(
    '/v1/api-keys',
    {
      config: { scope: 'api_keys:read' },
      schema: {
        tags: ['api-keys'],
        summary: 'List API keys',
        description: 'Never includes secrets. Admins see every key of the organization; members see their own.',
        querystring: ListQuery,
        response: { 200: pageEnvelope(z.array(ApiKey)), ...errorResponses },
      },
    },
    async (req) => {
      const p = await listApiKeys(req.ctx, { limit: req.query.limit, cursor: req.query.cursor, includeRevoked: req.query.include_revoked });
      return page(req, p.items, p);
    },
  );

  app.get(
    '/v1/api-keys/:id',
    {
      config: { scope: 'api_keys:read' },
      schema: { tags: ['api-keys'], summary: 'Get an API key', params: IdParam, response: { 200: envelope(ApiKey), ...errorResponses } },
    },
    async (req) => ok(req, await getApiKey(req.ctx, req.params.id)),
  );

  app.delete(
    '/v1/api-keys/:id',
    {
      config: { scope: 'api_keys:write' },
      schema: {
        tags: ['api-keys'],
        summary: 'Revoke an API key',
        description: 'Takes effect at once. Revoking a revoked key returns it unchanged.',
        params: IdParam,
        response: { 200: envelope(ApiKey), ...errorResponses },
      },
    },
    async (req) => ok(req, await revokeApiKey(req.ctx, req.params.id)),
  );
}
