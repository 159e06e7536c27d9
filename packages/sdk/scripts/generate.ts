// Generates the SDK's types (src/generated/openapi.ts) from the OpenAPI document: `npm run openapi` writes both,
// and test/sdk-openapi.test.ts fails when the committed file differs from what this produces now.
import openapiTS, { astToString, COMMENT_HEADER } from 'openapi-typescript';

/** Where the generated types live, relative to this file. */
export const GENERATED_TYPES = new URL('../src/generated/openapi.ts', import.meta.url);

/** The TypeScript source of `paths`, `components` and `operations` for the document (not modified). */
export async function generateSdkTypes(doc: Record<string, unknown>): Promise<string> {
  const ast = await openapiTS(doc as unknown as Parameters<typeof openapiTS>[0], { silent: true });
  return COMMENT_HEADER + astToString(ast);
}
