// Regenerates docs/openapi.json from the route schemas, and the SDK's types from it: `npm run openapi`.
import { writeFileSync } from 'node:fs';
import { GENERATED_TYPES, generateSdkTypes } from '../packages/sdk/scripts/generate.js';
import { generateOpenApi } from '../src/openapi.js';

const doc = await generateOpenApi();
writeFileSync(new URL('../docs/openapi.json', import.meta.url), `${JSON.stringify(doc, null, 2)}\n`);
console.log(`docs/openapi.json: ${Object.keys(doc.paths as object).length} paths`);
writeFileSync(GENERATED_TYPES, await generateSdkTypes(doc));
console.log('packages/sdk/src/generated/openapi.ts: regenerated');
