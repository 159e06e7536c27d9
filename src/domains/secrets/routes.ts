import { z } from 'zod';
import type { Deps } from '../../platform/context.js';
import { envelope, errorResponses, ok } from '../../platform/http/envelope.js';
import type { App } from '../../platform/http/server.js';
import { deleteSecret, listSecrets, putSecret, Secret, SecretName } from './service.js';

const tags = ['secrets'];
const Scope = z.enum(['user', 'organization']).default('user');

export async function secretRoutes(app: App, _deps: Deps) {
  app.post(
    '/v1/secrets',
    {
      config: { scope: 'secrets:write' },
      schema: {
        tags,
        summary: 'Create or replace a secret',
        description: [
          '`name` is upper-cased (other characters become `_`), `value` is encrypted at rest (AES-256-GCM) and never returned by any route. ',
          '`scope` `user` (default: yours only) or `organization` (needs `credentials:admin`). Used server-side: bring-your-own-key models name the secret they need ',
          '(`requiresSecret`), and tools resolve credentials from them. 201 when created, 200 when replaced.',
        ].join(''),
        body: z
          .object({
            name: SecretName,
            value: z
              .string()
              .min(1)
              .max(64 * 1024),
            scope: Scope,
          })
          .strict(),
        response: { 200: envelope(Secret), 201: envelope(Secret), ...errorResponses },
      },
    },
    async (req, reply) => {
      const { secret, created } = await putSecret(req.ctx, req.body);
      return reply.status(created ? 201 : 200).send(ok(req, secret));
    },
  );

  app.get(
    '/v1/secrets',
    {
      config: { scope: 'secrets:read' },
      schema: {
        tags,
        summary: 'List secret names',
        description: 'Your own secrets and the organization’s, by name and scope. Values are never returned.',
        response: { 200: envelope(z.array(Secret)), ...errorResponses },
      },
    },
    async (req) => ok(req, await listSecrets(req.ctx)),
  );

  app.delete(
    '/v1/secrets/:name',
    {
      config: { scope: 'secrets:write' },
      schema: {
        tags,
        summary: 'Delete a secret',
        params: z.object({ name: SecretName }),
        querystring: z.object({ scope: Scope }),
        response: { 204: z.null(), ...errorResponses },
      },
    },
    async (req, reply) => {
      await deleteSecret(req.ctx, req.params.name, req.query.scope);
      return reply.status(204).send(null);
    },
  );
}
