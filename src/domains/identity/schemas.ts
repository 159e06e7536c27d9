import { z } from 'zod';

export const ApiKey = z
  .object({
    id: z.string(),
    name: z.string(),
    environment: z.enum(['live', 'test']),
    prefix: z.string().describe('First characters of the key, to recognise it'),
    scopes: z.array(z.string()),
    userId: z.string().describe('The user the key acts for'),
    createdAt: z.string(),
    lastUsedAt: z.string().nullable(),
    expiresAt: z.string().nullable(),
    revokedAt: z.string().nullable(),
  })
  .meta({ id: 'ApiKey' });
export type ApiKey = z.infer<typeof ApiKey>;

export const CreatedApiKey = ApiKey.extend({
  key: z.string().describe('The secret. Shown only in this response; store it now.'),
}).meta({ id: 'CreatedApiKey' });

export const CreateApiKeyBody = z.object({
  name: z.string().trim().min(1).max(100),
  scopes: z
    .array(z.string().min(1).max(100))
    .min(1)
    .max(100)
    .describe(
      'Scopes, or wildcards such as `agent:*` and `*`; a wildcard grants the matching scopes the caller holds, a named scope the caller lacks is refused. The key stores the resulting concrete scopes.',
    ),
  environment: z.enum(['live', 'test']).default('live'),
  expiresAt: z.iso.datetime({ offset: true }).optional(),
});
export type CreateApiKeyBody = z.infer<typeof CreateApiKeyBody>;

export const IdParam = z.object({ id: z.string().min(1).max(200) });
