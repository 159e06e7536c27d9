import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { generateOpenApi } from '../src/openapi.js';

describe('OpenAPI document', () => {
  it('docs/openapi.json matches the route schemas (run `npm run openapi` after changing a route)', async () => {
    const committed = JSON.parse(readFileSync(new URL('../docs/openapi.json', import.meta.url), 'utf8'));
    expect(committed).toEqual(await generateOpenApi());
  });

  it('documents every public route with its security and error responses', async () => {
    const doc = (await generateOpenApi()) as { paths: Record<string, Record<string, { responses: Record<string, unknown> }>> };
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining(['/v1/activity', '/v1/api-keys', '/v1/organizations', '/v1/me', '/v1/workspaces/{id}/files', '/v1/billing/credits']),
    );
    expect(doc.paths['/v1/activity']!.get!.responses).toHaveProperty('401');
    expect(doc.paths['/v1/openapi.json']).toBeUndefined();
  });
});
