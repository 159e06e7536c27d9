// Generates the SDK's types (src/generated/openapi.ts) from the OpenAPI document: `npm run openapi` writes both,
// and test/sdk-openapi.test.ts fails when the committed file differs from what this produces now.
import openapiTS, { astToString, COMMENT_HEADER } from 'openapi-typescript';

/** Where the generated types live, relative to this file. */
export const GENERATED_TYPES = new URL('../src/generated/openapi.ts', import.meta.url);

type Operation = { parameters?: Array<{ name?: string; schema?: unknown }> };

/**
 * A parameter whose `schema` is not a Schema Object is not valid OpenAPI and makes openapi-typescript throw: drop
 * it (today only the business provider's webhook verification, whose free-form query is an inbound-provider route
 * no SDK caller uses). Returns the names dropped.
 */
function dropInvalidParameters(doc: { paths?: Record<string, Record<string, Operation>> }): string[] {
  const dropped: string[] = [];
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    for (const [method, op] of Object.entries(item)) {
      if (!op || !Array.isArray(op.parameters)) continue;
      op.parameters = op.parameters.filter((p) => {
        const valid = typeof p.schema === 'object' && p.schema !== null;
        if (!valid) dropped.push(`${method.toUpperCase()} ${path} ${String(p.name)}`);
        return valid;
      });
    }
  }
  return dropped;
}

/** The TypeScript source of `paths`, `components` and `operations` for the document (not modified). */
export async function generateSdkTypes(doc: Record<string, unknown>): Promise<string> {
  const copy = structuredClone(doc);
  dropInvalidParameters(copy);
  const ast = await openapiTS(copy as unknown as Parameters<typeof openapiTS>[0], { silent: true });
  return COMMENT_HEADER + astToString(ast);
}
